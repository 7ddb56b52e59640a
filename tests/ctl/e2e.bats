#!/usr/bin/env bats
# gpupoolctl against a real gpupoold (with a private munged): what an admin sees for pools,
# GPUs, leases and events; drain, fail (with swap), resume and release; refused requests.
# GPUs are registered and a lease acquired through the API with curl, as an agent and the
# SPANK plugin would. Port 25101 and /tmp/c-e2e.* belong to engineer C's range.

PORT=25101
URL=http://127.0.0.1:$PORT

# POST JSON as root with a fresh MUNGE credential; prints the answer body.
api_post() {
  local cred
  cred=$(printf gpupool | munge -S "$MUNGE_SOCKET")
  curl -sS --max-time 5 -H "Authorization: MUNGE $cred" -H 'Content-Type: application/json' \
    -d "$2" "$URL$1"
}

# Stops the gpupoold started by setup_file (by its recorded pid) and waits until it is gone.
stop_daemon() {
  local pid i
  pid=$(cat "$E2E_DIR/gpupoold.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid"
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
}

setup_file() {
  : "${GPUPOOLCTL:?set GPUPOOLCTL to the gpupoolctl binary}"
  : "${GPUPOOLD:?set GPUPOOLD to the gpupoold binary}"
  export E2E_DIR
  E2E_DIR=$(mktemp -d /tmp/c-e2e.XXXXXX)
  MUNGE_SOCKET=$("$BATS_TEST_DIRNAME/../lib/private-munged" start "$E2E_DIR/munge")
  export MUNGE_SOCKET
  # Let an unprivileged user reach the socket too (the key stays root-only).
  chmod 0711 "$E2E_DIR" "$E2E_DIR/munge"
  unset GPUPOOL_SERVER
  export GPUPOOL_CONF=$E2E_DIR/gpupool.conf
  cat >"$GPUPOOL_CONF" <<CONF
gpupoold = {
  listen = "127.0.0.1:$PORT";
  state_dir = "$E2E_DIR/state";
  slurm_reap = false;
  enforce_licenses = false;  # no Slurm here: root leases made-up jobs
  reap_interval = 0;
  unreachable_timeout = 3600;
  durability = "process";
  threads = 8;
};
pools = (
  { name = "a100"; models = [ "*A100*" ]; },
  { name = "h100"; models = [ "*H100*" ]; }
);
client = { server = "$URL"; timeout = 5; };
CONF
  # 3>&-: a background child holding bats' fd 3 would make bats wait for it.
  "$GPUPOOLD" -D -f "$GPUPOOL_CONF" >"$E2E_DIR/gpupoold.log" 2>&1 3>&- &
  echo $! >"$E2E_DIR/gpupoold.pid"
  local i
  for i in $(seq 50); do
    curl -s --max-time 1 "$URL/v1/ping" >/dev/null && break
    sleep 0.1
  done
  curl -sf --max-time 1 "$URL/v1/ping" >/dev/null || {
    echo "gpupoold did not start: $(tail -n 3 "$E2E_DIR/gpupoold.log")" >&2
    return 1
  }
  api_post /v1/agents/register '{"host":"gpuhost1","rack":"rack1","endpoint":"127.0.0.1:25120",
    "gpus":[{"uuid":"GPU-c0000000-0000-0000-0000-000000000000","index":0,"model":"A100-SXM4-80GB","memory_mib":81920},
            {"uuid":"GPU-c0000000-0000-0000-0000-000000000001","index":1,"model":"A100-SXM4-80GB","memory_mib":81920},
            {"uuid":"GPU-c0000000-0000-0000-0000-000000000002","index":2,"model":"H100-SXM5-80GB","memory_mib":81920}]}' \
    >"$E2E_DIR/register.json"
  api_post /v1/leases '{"job_id":42,"request":[{"pool":"a100","count":1}],"uid":1000,"user":"alice"}' \
    >"$E2E_DIR/acquire.json"
  grep -q '"created":true' "$E2E_DIR/acquire.json" || {
    echo "acquire failed: $(cat "$E2E_DIR/register.json" "$E2E_DIR/acquire.json")" >&2
    return 1
  }
}

teardown_file() {
  stop_daemon
  "$BATS_TEST_DIRNAME/../lib/private-munged" stop "$E2E_DIR/munge"
  rm -rf "$E2E_DIR"
}

@test "ping needs no credential" {
  run "$GPUPOOLCTL" ping
  [ "$status" -eq 0 ]
  [[ "$output" == "gpupoold at $URL is UP"* ]]
}

@test "show pools: counts per state, multi-line and -o" {
  run "$GPUPOOLCTL" show pools
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = "Pool=a100" ]
  [[ "${lines[1]}" == "   Total=2 Idle=1 Leased=1 Draining=0 Drained=0 Failed=0 Unreachable=0" ]]
  [[ "${lines[2]}" == "   Usable=2 Leases=1" ]]
  run "$GPUPOOLCTL" show pools h100 -o
  [ "$status" -eq 0 ]
  [ "$output" = "Pool=h100 Total=1 Idle=1 Leased=0 Draining=0 Drained=0 Failed=0 Unreachable=0 Usable=1 Leases=0" ]
}

@test "show pools NAME of an unknown pool is an error" {
  run "$GPUPOOLCTL" show pools v100
  [ "$status" -eq 1 ]
  [ "$output" = "gpupoolctl: error: no such pool 'v100'" ]
}

@test "show gpus: by id, by UUID, by pool" {
  run "$GPUPOOLCTL" show gpus gpuhost1:2 -o
  [ "$status" -eq 0 ]
  [[ "$output" == "GpuId=gpuhost1:2 Uuid=GPU-c0000000-0000-0000-0000-000000000002 Pool=h100 Rack=rack1 Host=gpuhost1 Index=2 Model=H100-SXM5-80GB Memory=80G "* ]]
  [[ "$output" == *" State=IDLE Job=(null) Lease=(null) "* ]]
  run "$GPUPOOLCTL" show gpus GPU-c0000000-0000-0000-0000-000000000002 -o
  [ "$status" -eq 0 ]
  [[ "$output" == "GpuId=gpuhost1:2 "* ]]
  run "$GPUPOOLCTL" show gpus pool=a100 -o
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 2 ]
  [[ "$output" == *"State=LEASED Job=42"* ]]
}

@test "show gpus of an unknown GPU is an error" {
  run "$GPUPOOLCTL" show gpus gpuhost7:0
  [ "$status" -eq 1 ]
  [[ "$output" == "gpupoolctl: error: no such GPU 'gpuhost7:0'"* ]]
}

@test "show leases: owner, request, generation; --json carries the token" {
  run "$GPUPOOLCTL" show leases job=42
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" =~ ^LeaseId=L[0-9]+\ JobId=42\ User=alice\(1000\)\ State=ACTIVE$ ]]
  [[ "${lines[1]}" == "   Pool=a100:1 Place=pack MinMemory=0 Generation=1 Movable=No" ]]
  [[ "${lines[2]}" =~ ^\ \ \ Gpus=gpuhost1:[01]$ ]]
  run "$GPUPOOLCTL" show leases job=42 --json
  [ "$status" -eq 0 ]
  [[ "$output" == *'"token": "'* ]]
  [[ "$output" == *'"job_id": 42'* ]]
}

@test "update: drain an idle GPU, then resume it" {
  run "$GPUPOOLCTL" update gpu=gpuhost1:2 state=drain reason="fan noise" -o
  [ "$status" -eq 0 ]
  [[ "$output" == *"State=DRAINED "* ]]
  [[ "$output" == *'Reason="fan noise"' ]]
  run "$GPUPOOLCTL" show pools h100 -o
  [[ "$output" == *"Drained=1 "*"Usable=0 "* ]]
  run "$GPUPOOLCTL" update gpu=gpuhost1:2 state=resume -o
  [ "$status" -eq 0 ]
  [[ "$output" == *"State=IDLE "* ]]
}

@test "update state=fail on a leased GPU swaps it and shows in events" {
  local leased
  leased=$("$GPUPOOLCTL" show leases job=42 -o | sed -n 's/.*Gpus=\([^ ]*\).*/\1/p')
  [ -n "$leased" ]
  run "$GPUPOOLCTL" update gpu="$leased" state=fail reason="Xid 79"
  [ "$status" -eq 0 ]
  [[ "$output" == *"State=FAILED "* ]]
  run "$GPUPOOLCTL" show leases job=42 -o
  [ "$status" -eq 0 ]
  [[ "$output" == *"Generation=2 "* ]]
  [[ "$output" != *"Gpus=$leased "* ]]
  run "$GPUPOOLCTL" show events job=42 -o
  [ "$status" -eq 0 ]
  [[ "$output" == *"Type=leased "* ]]
  [[ "$output" == *"Type=swapped "* ]]
  run "$GPUPOOLCTL" show events gpu="$leased" since=0 limit=1 -o
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "${lines[0]}" == Seq=* ]]
  "$GPUPOOLCTL" update gpu="$leased" state=resume >/dev/null
}

@test "a user who is not an admin may look but not update" {
  run runuser -u nobody -- env MUNGE_SOCKET="$MUNGE_SOCKET" GPUPOOL_CONF="$GPUPOOL_CONF" "$GPUPOOLCTL" show pools -o
  [ "$status" -eq 0 ]
  [[ "$output" == Pool=a100* ]]
  run runuser -u nobody -- env MUNGE_SOCKET="$MUNGE_SOCKET" GPUPOOL_CONF="$GPUPOOL_CONF" "$GPUPOOLCTL" update gpu=gpuhost1:2 state=drain
  [ "$status" -eq 1 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "$output" == "gpupoolctl: error: "*admin* ]]
  run "$GPUPOOLCTL" show gpus gpuhost1:2 -o
  [[ "$output" == *"State=IDLE "* ]]
}

@test "release: unknown lease is an error, job=42 releases its lease" {
  run "$GPUPOOLCTL" release lease=L999
  [ "$status" -eq 1 ]
  [[ "$output" == "gpupoolctl: error: "*L999* ]]
  run "$GPUPOOLCTL" release job=42 reason="e2e test"
  [ "$status" -eq 0 ]
  [[ "$output" =~ ^Released=L[0-9]+$ ]]
  run "$GPUPOOLCTL" show leases
  [ "$status" -eq 0 ]
  [ "$output" = "No leases" ]
  run "$GPUPOOLCTL" show events job=42 -o
  [[ "$output" == *"Type=released "* ]]
}

@test "a daemon that stopped: exit 1 and one line naming the address" {
  stop_daemon
  run "$GPUPOOLCTL" show leases
  [ "$status" -eq 1 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "$output" == "gpupoolctl: error: cannot reach gpupoold at $URL"* ]]
}
