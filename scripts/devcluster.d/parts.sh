# parts.sh: start, probe and stop the dev cluster's parts (one process each).
#
# Sourced by scripts/devcluster after layout.sh and config.sh. A part's pid is recorded
# in $PIDDIR/<part>.pid by whoever started it; a part counts as running only if that pid
# is alive AND its command line mentions $DEVDIR (so a recycled pid is never mistaken
# for ours, and `down` never signals a stranger). Every daemon runs in the foreground
# under setsid, with stdio on its own log, so the pid we record is the daemon itself.

pid_file() { echo "$PIDDIR/$1.pid"; }
part_log() { echo "$LOGDIR/$1.out"; }

# Prints the recorded pid of part $1 if that process is ours and alive. slurmdbd has no
# option naming its configuration (it finds slurmdbd.conf beside $SLURM_CONF), so for it
# the environment spawn gave it stands in for the command line.
part_pid() {
  local f pid
  f=$(pid_file "$1")
  [[ -f $f ]] || return 1
  read -r pid <"$f" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  local what=cmdline wanted=$DEVDIR seen tries=0
  # slurmdbd: the line is matched whole, so its words are split on NUL, not joined.
  [[ $1 == slurmdbd ]] && what=environ wanted=$'\n'"SLURM_CONF=$SLURM_CONF_FILE"$'\n'
  while kill -0 "$pid" 2>/dev/null; do
    seen=$'\n'$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/$what")$'\n'
    [[ $seen == *"$wanted"* ]] && { echo "$pid"; return 0; }
    # An exited process nobody has reaped yet (a zombie: where PID 1 does not reap, say)
    # also shows an empty command line, and is gone for good.
    local stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} == Z ]] && return 1
    # A process in the middle of an exec (private-munged becoming munged, setsid becoming
    # the daemon) shows an empty command line for a moment; a loaded CI machine caught
    # munge there and `up` called it dead. Only an empty one is worth a second look.
    [[ $seen == $'\n\n' ]] && ((tries++ < 20)) || return 1
    sleep 0.05
  done
  return 1
}

# A daemon from /usr/sbin, which a normal user's PATH may not hold.
sbin_command() { command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"; }

# The executable a part needs; empty for parts that are scripts of this repo.
part_binary() {
  case $1 in
    munge) command -v munged ;;
    mariadb) sbin_command mariadbd ;;
    slurmdbd) sbin_command slurmdbd ;;
    slurmctld) command -v slurmctld ;;
    slurmd-*) command -v slurmd ;;
    gpupoold | gpupoold2) echo "$GPUPOOLD_BIN" ;;
    etcd*) command -v etcd ;;
    agent-*) echo "$AGENTD_BIN" ;;
    publisher) echo "$PUBLISHER_BIN" ;;
  esac
}

# Why part $1 cannot be started (empty when it can).
part_missing() {
  local bin
  bin=$(part_binary "$1")
  if [[ -z $bin || ! -x $bin ]]; then
    echo "not built: ${bin:-$1 binary} missing"
    return
  fi
  case $1 in
    agent-* | publisher)
      [[ -x $GPUPOOLD_BIN ]] || echo "needs gpupoold, which is not built ($GPUPOOLD_BIN)"
      ;;
  esac
}

# Agent parameters for host $1: "listen-port control-port rack model mem count"
# (control-port "-": no control API).
agent_entry() {
  local i=0 host rack model mem count
  for entry in "${GPU_HOSTS[@]}"; do
    i=$((i + 1))
    read -r host rack model mem count <<<"$entry"
    if [[ $host == "$1" ]]; then
      echo "$(agent_port "$i") $(control_port "$i") $rack $model $mem $count"
      return 0
    fi
  done
  read -r host rack model mem count <<<"$JOIN_HOST"
  if [[ $host == "$1" ]]; then
    echo "$JOIN_AGENT_PORT - $rack $model $mem $count"
    return 0
  fi
  return 1
}

# spawn PART CMD...: runs CMD detached, records its pid.
spawn() {
  local part=$1 log
  shift
  log=$(part_log "$part")
  echo "=== $(date '+%F %T') starting: $*" >>"$log"
  (
    # The daemon keeps no descriptor of its caller but stdio: an inherited pipe (a test
    # runner's, a $(...)) would make the caller wait for the daemon to exit.
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      ((fd > 2 && fd != 255)) && eval "exec $fd>&-"
    done
    SLURM_CONF=$SLURM_CONF_FILE MUNGE_SOCKET=$MUNGE_SOCK GPUPOOL_CONF=$GPUPOOL_CONF_FILE \
      exec setsid "$@"
  ) </dev/null >>"$log" 2>&1 &
  local pid=$! waited=0 own now
  echo "$pid" >"$(pid_file "$part")"
  # Until the subshell has exec'd it is a copy of this script, and part_pid (which checks
  # the command line) would call the part dead: wait for the exec, not for the part (on a
  # loaded machine the gap was long enough to fail `up` at munge, the first part).
  own=$(tr '\0' ' ' </proc/$BASHPID/cmdline)
  while kill -0 "$pid" 2>/dev/null && ((waited < 1000)); do
    now=$(tr '\0' ' ' 2>/dev/null </proc/$pid/cmdline) && [[ -n $now && $now != "$own" ]] && break
    sleep 0.01
    waited=$((waited + 1))
  done
}

# start_etcd_member N: etcd member N of the HA dev cluster, on loopback, TLS for clients
# and peers, both made to show a certificate of the cluster's CA (make_etcd_tls).
start_etcd_member() {
  local n=$1 cluster="" i state=new
  for ((i = 1; i <= ETCD_MEMBERS; i++)); do
    cluster+="${cluster:+,}etcd$i=$(etcd_peer_url "$i")"
  done
  # The data directory is kept: `up` after `down` finds the cluster (and its state) as it was,
  # unless it was made for other ports (GPUPOOL_DEV_PORTBASE changed): etcd would then call
  # peers that are not there for ever, so the HA state starts afresh.
  if [[ -f $ETCD_DIR/cluster && $(cat "$ETCD_DIR/cluster") != "$cluster" ]]; then
    note "etcd data in $ETCD_DIR was made for other ports: starting etcd afresh"
    rm -rf "$ETCD_DIR"/etcd[0-9]* "$ETCD_DIR/auth.done"
  fi
  echo "$cluster" >"$ETCD_DIR/cluster"
  [[ -d $ETCD_DIR/etcd$n/member ]] && state=existing
  # --max-txn-ops: gpupoold's group commits hold more than etcd's default 128 operations
  # when many clients acquire at once (gpupoold(8), HIGH AVAILABILITY).
  spawn "etcd$n" "$(part_binary "etcd$n")" --name "etcd$n" --data-dir "$ETCD_DIR/etcd$n" \
    --listen-client-urls "$(etcd_client_url "$n")" --advertise-client-urls "$(etcd_client_url "$n")" \
    --listen-peer-urls "$(etcd_peer_url "$n")" --initial-advertise-peer-urls "$(etcd_peer_url "$n")" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" \
    --initial-cluster-token "gpupool-dev-$PORTBASE" --max-txn-ops 1024 \
    --cert-file "$ETCD_TLS_DIR/server.pem" --key-file "$ETCD_TLS_DIR/server-key.pem" \
    --trusted-ca-file "$ETCD_TLS_DIR/ca.pem" --client-cert-auth \
    --peer-cert-file "$ETCD_TLS_DIR/server.pem" --peer-key-file "$ETCD_TLS_DIR/server-key.pem" \
    --peer-trusted-ca-file "$ETCD_TLS_DIR/ca.pem" --peer-client-cert-auth
}

# dev_etcdctl ARGS...: etcdctl against the HA cluster's etcd, with gpupool's client
# certificate (it has no CN, so etcd takes no user from it); add --user for auth.
dev_etcdctl() {
  local endpoints="" i
  for ((i = 1; i <= ETCD_MEMBERS; i++)); do endpoints+="${endpoints:+,}$(etcd_client_url "$i")"; done
  ETCDCTL_API=3 timeout 20 etcdctl --endpoints "$endpoints" --cacert "$ETCD_TLS_DIR/ca.pem" \
    --cert "$ETCD_TLS_DIR/gpupool.pem" --key "$ETCD_TLS_DIR/gpupool-key.pem" "$@"
}

# etcd_enable_auth: once per etcd data directory, etcd's users and roles: root (for admins
# and tests), and gpupool, whose role may read and write $ETCD_PREFIX and nothing else;
# then auth on. Needs every member up.
etcd_enable_auth() {
  [[ -f $ETCD_DIR/auth.done ]] && return 0
  local root="root:$(cat "$ETCD_TLS_DIR/root.password")" out step
  # The data outlived its marker (a failed `up` after `auth enable`): auth is on already.
  if dev_etcdctl --user "$root" auth enable >/dev/null 2>&1 &&
    dev_etcdctl --user "$root" role get gpupool >/dev/null 2>&1; then
    touch "$ETCD_DIR/auth.done"
    return 0
  fi
  for step in "user add $root" "user grant-role root root" "role add gpupool" \
    "role grant-permission gpupool --prefix=true readwrite $ETCD_PREFIX" \
    "user add $ETCD_USER:$(cat "$ETCD_TLS_DIR/gpupool.password")" "user grant-role $ETCD_USER gpupool" \
    "auth enable"; do
    # shellcheck disable=SC2086  # words of the step
    out=$(dev_etcdctl $step 2>&1) || [[ $out == *"already exists"* ]] ||
      die "etcdctl ${step%%:*} failed: $out"
  done
  touch "$ETCD_DIR/auth.done"
}

part_start() {
  local part=$1
  case $part in
    munge)
      # The tests' private-munged, in the foreground: it makes the key and becomes munged
      # (socket $MUNGE_DIR/munge.socket), so the pid spawn records is munged's.
      spawn munge "$PRIVATE_MUNGED" run "$MUNGE_DIR"
      ;;
    mariadb)
      # The data directory is made once per dev cluster directory (about 6 s) and kept.
      if [[ ! -d $MARIADB_DATA/mysql ]]; then
        rm -rf "$MARIADB_DATA"
        "$(sbin_command mariadb-install-db)" --no-defaults --datadir="$MARIADB_DATA" \
          --user="$(id -un)" --auth-root-authentication-method=normal --skip-test-db \
          >>"$LOGDIR/mariadb-install.log" 2>&1 ||
          fail_part mariadb "mariadb-install-db failed (see $LOGDIR/mariadb-install.log)"
      fi
      # --user: mariadbd refuses to run as root unless told to; for anyone else it is
      # their own name, which changes nothing. Loopback only; the socket sits in the 0700
      # $MARIADB_DIR. The lock wait timeout is the value slurmdbd asks for (it logs an
      # error otherwise); the buffer pool keeps its default, 128 MiB, the least it accepts.
      spawn mariadb "$(part_binary mariadb)" --no-defaults --user="$(id -un)" \
        --datadir="$MARIADB_DATA" --socket="$MARIADB_SOCK" --port="$MARIADB_PORT" \
        --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$DEVDIR/run/mariadbd.pid" \
        --log-error="$LOGDIR/mariadb.log" --init-file="$MARIADB_INIT_SQL" \
        --innodb-lock-wait-timeout=900 --max-connections=50
      ;;
    slurmdbd)
      spawn slurmdbd "$(part_binary slurmdbd)" -D
      ;;
    slurmctld)
      spawn slurmctld "$(part_binary slurmctld)" -D -f "$SLURM_CONF_FILE"
      ;;
    slurmd-*)
      spawn "$part" "$(part_binary "$part")" -D -N "${part#slurmd-}" -f "$SLURM_CONF_FILE"
      ;;
    gpupoold)
      spawn gpupoold "$GPUPOOLD_BIN" -D -f "$GPUPOOL_CONF_FILE"
      ;;
    gpupoold2)
      spawn gpupoold2 "$GPUPOOLD_BIN" -D -f "$GPUPOOL_CONF_FILE" --listen "127.0.0.1:$POOLD2_PORT"
      ;;
    etcd*)
      # A member answers only once a quorum has formed: start every member that is not
      # running, so that waiting for this one cannot wait for ever.
      local i
      for ((i = 1; i <= ETCD_MEMBERS; i++)); do
        [[ etcd$i == "$part" ]] || ! part_pid "etcd$i" >/dev/null || continue
        start_etcd_member "$i"
      done
      ;;
    agent-*)
      local host=${part#agent-} port control rack model mem count control_args=()
      read -r port control rack model mem count <<<"$(agent_entry "$host")"
      [[ $control == - ]] || control_args=(--control "127.0.0.1:$control")
      spawn "$part" "$AGENTD_BIN" -D -f "$GPUPOOL_CONF_FILE" --host "$host" --rack "$rack" \
        --listen "127.0.0.1:$port" "${control_args[@]}" --sim-gpus "$model:$mem:$count"
      ;;
    publisher)
      # `up` waits for this file: a stale one would let it return before publishing.
      rm -f "$DEVDIR/publisher.ok"
      spawn publisher "$(part_binary publisher)" -D --devdir "$DEVDIR" \
        --server "$POOLD_SERVERS" --licenses "$LICENSES_CONF" --interval 1
      ;;
  esac
}

# A MUNGE credential for gpupoold's API (payload "gpupool", see docs/api.md).
munge_cred() { munge -S "$MUNGE_SOCK" -s gpupool 2>/dev/null; }

# poold_get PATH: authenticated GET against the dev gpupoold (its leader, with replicas);
# prints the body.
poold_get() {
  local cred url
  cred=$(munge_cred) || return 1
  for url in ${POOLD_SERVERS//,/ }; do
    curl -sf --max-time 3 -H "Authorization: MUNGE $cred" "$url$1" && return 0
  done
  return 1
}

# poold_role PART: leader or follower (replicas only; empty when it does not answer).
poold_role() {
  local url=$POOLD_URL
  [[ $1 == gpupoold2 ]] && url=$POOLD2_URL
  curl -sf --max-time 2 "$url/v1/ping" | jq -r '.role // empty' 2>/dev/null
}

# Does part $1 answer? Returns 0 when it does; prints why not otherwise.
part_ready() {
  local part=$1
  case $part in
    munge)
      munge -S "$MUNGE_SOCK" -n 2>/dev/null | unmunge -S "$MUNGE_SOCK" >/dev/null 2>&1 ||
        { echo "munge/unmunge through $MUNGE_SOCK fails"; return 1; }
      ;;
    mariadb)
      "$(sbin_command mariadb-admin)" --no-defaults --socket="$MARIADB_SOCK" --user=root \
        --connect-timeout=2 ping >/dev/null 2>&1 ||
        { echo "mariadb-admin ping through $MARIADB_SOCK fails"; return 1; }
      ;;
    slurmdbd)
      SLURM_CONF=$SLURM_CONF_FILE timeout 10 sacctmgr -n -P show cluster format=cluster \
        >/dev/null 2>&1 || { echo "sacctmgr cannot reach slurmdbd on port $DBD_PORT"; return 1; }
      ;;
    slurmctld)
      SLURM_CONF=$SLURM_CONF_FILE scontrol ping 2>/dev/null | grep -q 'is UP' ||
        { echo "scontrol ping does not answer UP"; return 1; }
      ;;
    slurmd-*)
      local node=${part#slurmd-} state
      state=$(SLURM_CONF=$SLURM_CONF_FILE sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -1)
      case $state in
        idle | mixed | allocated | completing) ;;
        *drain* | *down*)
          local reason
          reason=$(SLURM_CONF=$SLURM_CONF_FILE sinfo -h -N -n "$node" -o '%E' 2>/dev/null | head -1)
          echo "$node is $state (Reason=$reason)"
          return 1
          ;;
        *) echo "$node state is '${state:-unknown}'"; return 1 ;;
      esac
      # Right after a slurmd restart slurmctld still shows the old registration: wait
      # until it has heard from the process we recorded.
      local pid started registered
      pid=$(part_pid "$part") || { echo "no slurmd process for $node"; return 1; }
      started=$(($(date +%s) - $(ps -o etimes= -p "$pid")))
      registered=$(SLURM_CONF=$SLURM_CONF_FILE scontrol show node "$node" 2>/dev/null |
        grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
      registered=$(date -d "$registered" +%s 2>/dev/null || echo 0)
      ((registered >= started - 1)) ||
        { echo "$node has not registered since slurmd (pid $pid) started"; return 1; }
      ;;
    gpupoold | gpupoold2)
      local url=$POOLD_URL
      [[ $part == gpupoold2 ]] && url=$POOLD2_URL
      curl -sf --max-time 2 "$url/v1/ping" | grep -q '"ok":true' ||
        { echo "GET $url/v1/ping does not answer ok"; return 1; }
      ;;
    etcd*)
      curl -sf --max-time 2 --cacert "$ETCD_TLS_DIR/ca.pem" --cert "$ETCD_TLS_DIR/gpupool.pem" \
        --key "$ETCD_TLS_DIR/gpupool-key.pem" "$(etcd_client_url "${part#etcd}")/health" |
        grep -q '"health":"true"' || { echo "etcd ${part#etcd} does not report health true"; return 1; }
      ;;
    agent-*)
      local host=${part#agent-} port control rack model mem count body seen
      read -r port control rack model mem count <<<"$(agent_entry "$host")"
      body=$(poold_get "/v1/gpus") || { echo "GET /v1/gpus fails"; return 1; }
      seen=$(jq -r --arg h "$host" \
        '[.gpus[] | select(.host == $h and .state != "UNREACHABLE")] | length' <<<"$body")
      [[ $seen == "$count" ]] ||
        { echo "$host has ${seen:-0} of $count GPUs registered and reachable"; return 1; }
      ;;
    publisher)
      [[ -f $DEVDIR/publisher.ok ]] ||
        { echo "publisher has not published yet ($DEVDIR/publisher.ok missing)"; return 1; }
      ;;
  esac
}

# part_stop PART [SIGNAL]: signal the recorded pid, wait up to 10 s, then SIGKILL.
# still_exiting PID: PID has not finished exiting yet. Its command line empties as soon as
# it releases its memory, which for a daemon holding gigabytes of sim GPU memory can be a
# while before it is gone (or a zombie): part_pid no longer sees it by then. A pid whose
# command line is not empty belongs to someone else now.
still_exiting() {
  local pid=$1 stat
  stat=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ -n $stat && $stat != Z* ]] || return 1
  [[ -z $(tr -d '\0' <"/proc/$pid/cmdline" 2>/dev/null) ]]
}

part_stop() {
  local part=$1 sig=${2:-TERM} pid i
  pid=$(part_pid "$part") || { rm -f "$(pid_file "$part")"; return 0; }
  kill -s "$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    part_pid "$part" >/dev/null || break
    sleep 0.1
  done
  if part_pid "$part" >/dev/null; then
    kill -s KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      part_pid "$part" >/dev/null || break
      sleep 0.1
    done
  fi
  for ((i = 0; i < 100; i++)); do
    still_exiting "$pid" || break
    sleep 0.1
  done
  rm -f "$(pid_file "$part")"
}
