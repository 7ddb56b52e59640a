#!/usr/bin/env bats
# gpupoold high availability on the dev cluster (GPUPOOL_DEV_HA=1: a 3-member etcd with TLS
# and auth on, and two gpupoold replicas): the replicas say who leads, etcd gives nothing to
# a client without the cluster's certificate or gpupoold's role, and jobs submitted across
# a kill -9 of the leader start normally with their leases, while no node drains.
load ../lib/helpers

FLAGS=${BATS_FILE_TMPDIR:-/tmp}/flags
mkdir -p "$FLAGS"

role_of() { "$DEVCLUSTER" status | grep "^Part=$1 " | grep -o 'Role=[a-z]*' | cut -d= -f2; }
leader_is() { [[ $(role_of "$1") == leader ]]; }

@test "the dev cluster runs etcd and two replicas; status and gpupoolctl ping name the leader" {
  run "$DEVCLUSTER" status
  [[ $status == 0 ]]
  for part in etcd1 etcd2 etcd3 gpupoold gpupoold2; do [[ $output == *"Part=$part State=UP"* ]]; done
  [[ $(grep -c 'Role=leader' <<<"$output") == 1 ]]
  [[ $(grep -c 'Role=follower' <<<"$output") == 1 ]]
  [[ $GPUPOOL_SERVER == *,* ]]  # clients are given both replicas
  # Each replica, asked alone, says which one leads.
  leader=$(grep 'Role=leader' <<<"$output" | grep -o 'Part=[a-z0-9]*' | cut -d= -f2)
  follower_url=$(tr ',' '\n' <<<"$GPUPOOL_SERVER" | sed -n 2p)
  [[ $leader == gpupoold ]] || follower_url=$(tr ',' '\n' <<<"$GPUPOOL_SERVER" | sed -n 1p)
  run gpupoolctl --server "$follower_url" ping
  [[ $status == 0 ]]
  [[ $output == *"is a follower; the leader is http://127.0.0.1:"* ]]
}

# etcd, locked down (gpupoold(8), ETCD SECURITY): TLS with client certificates, auth on,
# gpupoold's user limited to its prefix. Requests go to etcd's JSON gateway, as gpupoold's do.
ETCD1=${GPUPOOL_DEV_ETCD_ENDPOINTS%%,*}
TLS=$GPUPOOL_DEV_ETCD_TLS
b64() { printf %s "$1" | base64 -w0; }
# etcd_post PATH BODY TOKEN [CERT KEY]: POSTs to etcd's gateway with that client certificate
# (default gpupoold's; CERT "none": none) and token (empty: none); prints etcd's answer, then
# the HTTP status ("000": the TLS handshake was refused).
etcd_post() {
  local path=$1 body=$2 token=${3:-} cert=${4:-$TLS/gpupool.pem} key=${5:-$TLS/gpupool-key.pem} args=()
  [[ $cert == none ]] || args=(--cert "$cert" --key "$key")
  [[ -z $token ]] || args+=(-H "Authorization: $token")
  curl -s --max-time 5 --cacert "$TLS/ca.pem" "${args[@]}" -w '\n%{http_code}' -d "$body" "$ETCD1$path" || true
}
token_of() { etcd_post /v3/auth/authenticate "{\"name\":\"$1\",\"password\":\"$2\"}" | head -1 | jq -r .token; }
range_prefix() {
  echo "{\"key\":\"$(b64 "$GPUPOOL_DEV_ETCD_PREFIX")\",\"range_end\":\"$(b64 "${GPUPOOL_DEV_ETCD_PREFIX%/}0")\",\"keys_only\":true}"
}
put_leader() { echo "{\"key\":\"$(b64 "${GPUPOOL_DEV_ETCD_PREFIX}leader")\",\"value\":\"$(b64 http://192.0.2.1:9)\"}"; }
# client_cert DIR NAME SUBJECT CA: DIR/NAME.pem and DIR/NAME-key.pem, signed by the CA in
# CA.pem and CA-key.pem.
client_cert() {
  local dir=$1 name=$2 subject=$3 ca=$4
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/$name-key.pem" \
    -subj "$subject" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$ca.pem" -CAkey "$ca-key.pem" -CAserial "$dir/serial" \
    -CAcreateserial -days 1 -out "$dir/$name.pem" 2>/dev/null
}
root_etcdctl() {
  ETCDCTL_API=3 timeout 20 etcdctl --endpoints "$GPUPOOL_DEV_ETCD_ENDPOINTS" --cacert "$TLS/ca.pem" \
    --cert "$TLS/gpupool.pem" --key "$TLS/gpupool-key.pem" --user "root:$(cat "$TLS/root.password")" "$@"
}

@test "etcd: gpupoold's user reads its prefix over TLS; no certificate, another CA's or one with a CN gets nothing" {
  [[ $ETCD1 == https://* ]]
  grep -q '^ *etcd_cert_file' "$GPUPOOL_CONF" && grep -q '^ *etcd_user' "$GPUPOOL_CONF"
  # What gpupoold does: its certificate and its user. The leader key is there.
  token=$(token_of gpupool "$(cat "$TLS/gpupool.password")")
  [[ -n $token && $token != null ]]
  run etcd_post /v3/kv/range "$(range_prefix)" "$token"
  [[ ${lines[-1]} == 200 ]]
  grep -q "$(b64 "${GPUPOOL_DEV_ETCD_PREFIX}leader")" <<<"$output"

  # No client certificate: the TLS handshake is refused, for reads and writes alike.
  run etcd_post /v3/kv/range "$(range_prefix)" "$token" none
  [[ ${lines[-1]} == 000 ]]
  run etcd_post /v3/kv/put "$(put_leader)" "$token" none
  [[ ${lines[-1]} == 000 ]]

  # A certificate of another CA, even with a valid token: refused at the handshake.
  other=$BATS_FILE_TMPDIR/other-ca
  mkdir -p "$other"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$other/ca-key.pem" \
    -subj "/CN=not the cluster's CA" -days 1 -out "$other/ca.pem" 2>/dev/null
  client_cert "$other" stranger /O=gpupool "$other/ca"
  run etcd_post /v3/kv/put "$(put_leader)" "$token" "$other/stranger.pem" "$other/stranger-key.pem"
  [[ ${lines[-1]} == 000 ]]

  # The cluster's CA, but a CN (the user etcd would take from it over gRPC): the gateway refuses it.
  client_cert "$other" cn /CN=root "$TLS/ca"
  run etcd_post /v3/kv/range "$(range_prefix)" "" "$other/cn.pem" "$other/cn-key.pem"
  [[ ${lines[-1]} == 400 ]]
  [[ $output != *'"kvs"'* ]]

  # gpupoold's certificate but no user: auth is on.
  run etcd_post /v3/kv/range "$(range_prefix)" ""
  [[ ${lines[-1]} == 400 && $output == *"user name is empty"* ]]
  run etcd_post /v3/kv/put "$(put_leader)" ""
  [[ ${lines[-1]} == 400 ]]
  # A wrong password gets no token.
  [[ $(token_of gpupool wrong-password) == null ]]
  # After all that, the leader key still names a replica, not the address written above.
  run gpupoolctl ping
  [[ $status == 0 && $output != *"192.0.2.1"* ]]
}

@test "etcd: a user whose role covers another prefix can neither read nor write gpupoold's" {
  # Made here, as a site's other etcd tenant would be: its own role on its own prefix.
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  root_etcdctl user add "neighbour:$password" >/dev/null 2>&1 ||
    root_etcdctl user passwd neighbour --interactive=false <<<"$password" >/dev/null
  root_etcdctl role add neighbour >/dev/null 2>&1 || true
  root_etcdctl role grant-permission neighbour --prefix=true readwrite /neighbour/ >/dev/null
  root_etcdctl user grant-role neighbour neighbour >/dev/null 2>&1 || true
  token=$(token_of neighbour "$password")
  [[ -n $token && $token != null ]]
  # Its own prefix: allowed (so the refusals below are about the role, not the user).
  run etcd_post /v3/kv/put "{\"key\":\"$(b64 /neighbour/x)\",\"value\":\"$(b64 y)\"}" "$token"
  [[ ${lines[-1]} == 200 ]]
  run etcd_post /v3/kv/range "$(range_prefix)" "$token"
  [[ ${lines[-1]} == 403 && $output == *"permission denied"* ]]
  run etcd_post /v3/kv/put "$(put_leader)" "$token"
  [[ ${lines[-1]} == 403 && $output == *"permission denied"* ]]
  # A delete of the whole prefix (what would depose the leader) is refused too.
  run etcd_post /v3/kv/deleterange "$(range_prefix | jq -c 'del(.keys_only)')" "$token"
  [[ ${lines[-1]} == 403 ]]
  run gpupoolctl ping
  [[ $status == 0 ]]
}

@test "jobs submitted across a kill -9 of the leader start normally and keep their GPUs" {
  leader=gpupoold
  leader_is gpupoold || leader=gpupoold2
  other=gpupoold2
  [[ $leader == gpupoold ]] || other=gpupoold
  before=$(held_job --gpu-pool=a100:1)
  wait_until 30 job_running "$before"
  wait_until 15 job_has_lease "$before"
  gpus_before=$(lease_gpus_of_job "$before")

  "$DEVCLUSTER" kill "$leader"
  after=$(submit --gpu-pool=a100:1 --wrap 'echo "GPUs: $CUDA_VISIBLE_DEVICES $GPUPOOL_LEASE_ID"')
  wait_until 20 leader_is "$other"
  wait_until 40 job_ended "$after"
  [[ $(job_state "$after") == COMPLETED ]]
  grep -q "GPUs: 0 L" "$OUT/$after.out"
  # The running job's lease moved nowhere: the new leader has it, with the same GPUs.
  [[ $(lease_gpus_of_job "$before") == "$gpus_before" ]]
  finish "$before"
  wait_until 30 job_ended "$before"
  [[ $(job_state "$before") == COMPLETED ]]
  wait_until 15 job_has_no_lease "$before"
  no_node_drained

  # The killed replica comes back as a follower (as systemd would restart it).
  detached "$DEVCLUSTER" start "$leader"
  [[ $(role_of "$leader") == follower ]]
}

some_leader() { "$DEVCLUSTER" status | grep -q 'Role=leader'; }

@test "with etcd's quorum lost, a job that needs a lease fails with a message it prints, and no node drains" {
  "$DEVCLUSTER" kill etcd2
  "$DEVCLUSTER" kill etcd3
  id=$(submit --gpu-pool=a100:1 --wrap 'echo "should not run"')
  wait_until 60 job_ended "$id"
  [[ $(job_state "$id") != COMPLETED ]]
  ! grep -q "should not run" "$OUT/$id.out" || false
  grep -q "gpupool" "$OUT/$id.out"
  grep -qiE "etcd|leader" "$OUT/$id.out"
  no_node_drained

  # Quorum back: a replica is elected, the stopped one comes back as a follower, and
  # jobs get leases again.
  detached "$DEVCLUSTER" start etcd2
  wait_until 30 some_leader
  detached "$DEVCLUSTER" up
  again=$(submit --gpu-pool=a100:1 --wrap 'echo "GPUs: $CUDA_VISIBLE_DEVICES $GPUPOOL_LEASE_ID"')
  wait_until 60 job_ended "$again"
  [[ $(job_state "$again") == COMPLETED ]]
  grep -q "GPUs: 0 L" "$OUT/$again.out"
  no_node_drained
}
