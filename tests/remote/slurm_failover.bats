#!/usr/bin/env bats
# A running CUDA process survives its GPU (gpupool-remote(7), FAILOVER): an sbatch
# --gpu-pool job runs the iterate program (evolving state, host input every iteration, a
# large allocation written once, a CPU reference); mid-run its GPU is failed, hung, drained
# or migrated, or its agent is killed. gpupoold swaps the lease, spank_gpupool's watcher rewrites the lease file, and
# the library recovers on the new GPU: the program prints PASS, the job COMPLETES, an event
# shows the move, no node is drained. With GPUPOOL_FAILOVER=off the program gets the CUDA
# error it got before failover existed, and a drain leaves its GPU to it.

load slurm_helpers

setup() {
  FAILED_GPU="" KILLED_AGENT="" HUNG="" DRAINED=()  # HUNG: "HOST INDEX" of a sim fault
}

teardown() {
  [[ -n $KILLED_AGENT ]] && "$DEVCLUSTER" start "$KILLED_AGENT" >/dev/null 2>&1 || true
  [[ -n $HUNG ]] && fault "${HUNG% *}" "${HUNG#* }" clear >/dev/null 2>&1 || true
  local gpu
  for gpu in "${DRAINED[@]}"; do
    gpupoolctl update gpu="$gpu" state=resume reason="failover test" >/dev/null 2>&1 || true
  done
  [[ -n $FAILED_GPU ]] &&
    gpupoolctl update gpu="$FAILED_GPU" state=resume reason="failover test" >/dev/null 2>&1 || true
  # Back to IDLE before the next test (a resumed GPU of a killed agent heartbeats again).
  wait_until 30 no_gpu_unreachable || true
}

# fault HOST INDEX MODE: sets a sim fault through the agent's control API (MUNGE
# authenticated: a credential whose payload is "gpupool"), e.g. `fault gpuhost1 0 hang`.
fault() {
  local port=$((GPUPOOL_DEV_PORTBASE + 29 + ${1#gpuhost}))
  curl -sf -H "Authorization: MUNGE $(printf gpupool | munge -S "$MUNGE_SOCKET")" \
    -d "{\"index\": $2, \"mode\": \"$3\"}" "http://127.0.0.1:$port/v1/faults"
}

no_gpu_unreachable() { ! gpupoolctl show gpus --json | jq -e '.gpus[] | select(.state == "UNREACHABLE")' >/dev/null; }

running_or_ended() { grep -q '^iterate: running' "$OUT/$1.out" 2>/dev/null || job_ended "$1"; }

# submit_iterate TRANSPORT [ENV=VALUE...]: a job running iterate on one pool GPU; prints its id.
submit_iterate() {
  local transport=$1
  shift
  (
    export GPUPOOL_RECOVERY_DEADLINE=90 "$@"
    submit_on "$transport" --gpu-pool="a100:${GPUS:-1}" \
      --wrap "$PROGRAMS/iterate ${ITERATE_ARGS:-200 15 4 32}"
  )
}

# start_and_wait TRANSPORT [ENV...]: submits, waits until iterate is running; sets JOB,
# LEASE, FAILED_GPU (the job's GPU id) and OLD_UUID.
start_and_wait() {
  JOB=$(submit_iterate "$@")
  [[ -n $JOB ]]
  wait_until 120 running_or_ended "$JOB"
  grep -q '^iterate: running' "$OUT/$JOB.out" || { job_completed_ok "$JOB"; false; }
  FAILED_GPU=$(lease_field_of_job "$JOB" '.gpus[0].id')
  OLD_UUID=$(lease_field_of_job "$JOB" '.gpus[0].uuid')
  LEASE=$(lease_field_of_job "$JOB" '.id')
  [[ -n $FAILED_GPU && -n $OLD_UUID && -n $LEASE ]]
}

# The job went on after the move: PASS, COMPLETED 0:0, the recovery logged by the library
# on a GPU other than the failed one, and the swap in gpupoold's events.
expect_recovered() {
  wait_job_end "$JOB" 240
  job_completed_ok "$JOB"
  grep -q '^iterate: PASS' "$OUT/$JOB.out"
  grep -q "failed (CUDA error [0-9]*): recovering" "$OUT/$JOB.out"
  local line new_uuid
  line=$(grep -o 'GPU 0: recovered on GPU-[^ ]* at [^ ]* in [0-9]* ms' "$OUT/$JOB.out" | tail -1)
  [[ -n $line ]]
  new_uuid=$(awk '{print $5}' <<<"$line")
  [[ $new_uuid != "$OLD_UUID" ]]
  agent_saw_client "$LEASE" "$new_uuid"
  events_of_job "$JOB" | grep -qx "${MOVE_EVENT:-swapped}"
  # The new GPU's agent told gpupoold about the recovery.
  gpupoolctl show events job="$JOB" --json |
    jq -e '.events[] | select(.type == "recovered") | select(.detail | test("recovered here from '"$OLD_UUID"': paused [0-9]+ ms"))' >/dev/null
  no_node_drained
}

@test "a GPU failed under a running program over tcp: the program goes on on the new GPU" {
  start_and_wait tcp
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="failover test" >/dev/null
  expect_recovered
}

@test "a GPU failed under a running program over shared memory: the program goes on" {
  start_and_wait shm
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="failover test" >/dev/null
  expect_recovered
}

@test "the agent of a running program's GPU killed with SIGKILL: the program tells gpupoold, whose probe swaps at once, and goes on" {
  start_and_wait tcp
  local host
  host=$(lease_field_of_job "$JOB" '.gpus[0].host')
  KILLED_AGENT=agent-$host
  FAILED_GPU=""  # its GPUs come back when the agent does
  "$DEVCLUSTER" kill "$KILLED_AGENT" >/dev/null
  expect_recovered
  # The swap came from the program's report and gpupoold's own probe, not from the agent's
  # silence running out unreachable_timeout (6 s here): the event says which, and so does
  # the library's line with gpupoold's verdict.
  grep -qE "GPU $OLD_UUID: told gpupoold; its probe: the agent at [^ ]+ did not answer \(Connection refused\)" "$OUT/$JOB.out"
  gpupoolctl show events job="$JOB" --json |
    jq -e --arg l "$LEASE" '.events[] | select(.type == "unreachable") | select(.detail | contains("did not answer gpupoold'"'"'s probe (Connection refused) after a process of lease " + $l + " lost its connection to it"))' >/dev/null
  ! gpupoolctl show events job="$JOB" --json | jq -e '.events[] | select(.detail | test("no heartbeat from"))' >/dev/null || false
  (($(curl -s "${GPUPOOL_SERVER%%,*}/metrics" | awk '$1 == "gpupool_agent_lost_confirmed_total" {print $2}') >= 1))
}

# agent_lost TOKEN LEASE GPU: a process's report (POST /v1/leases/agent-lost) as curl sends
# it; prints the HTTP code, then the body.
agent_lost() {
  curl -s -w '\n%{http_code}' -H "Authorization: Lease $1" -H 'Content-Type: application/json' \
    -d "{\"id\": \"$2\", \"gpu\": \"$3\"}" "${GPUPOOL_SERVER%%,*}/v1/leases/agent-lost"
}

@test "a lease's process that says its live agent is lost changes nothing; another lease's token is refused; a flood is cut off" {
  start_and_wait tcp
  local token other_token other_job answer
  token=$(lease_field_of_job "$JOB" '.token')
  [[ -n $token && $token != null ]]
  FAILED_GPU=""  # nothing may fail here
  # The lease's own token, about an agent that is alive: gpupoold probes it and keeps it.
  answer=$(agent_lost "$token" "$LEASE" "$OLD_UUID")
  [[ $(tail -1 <<<"$answer") == 200 ]]
  [[ $(head -1 <<<"$answer" | jq -r '.agent_lost') == false ]]
  head -1 <<<"$answer" | jq -e '.probe | test("answered")' >/dev/null
  # Another running job's lease token, about this lease's GPU: refused, nothing probed.
  other_job=$(submit_iterate tcp)
  wait_until 120 running_or_ended "$other_job"
  other_token=$(lease_field_of_job "$other_job" '.token')
  answer=$(agent_lost "$other_token" "$LEASE" "$OLD_UUID")
  [[ $(tail -1 <<<"$answer") == 403 ]]
  # No token scheme at all: 401.
  [[ $(curl -s -o /dev/null -w '%{http_code}' -d "{\"id\": \"$LEASE\", \"gpu\": \"$OLD_UUID\"}" \
    "${GPUPOOL_SERVER%%,*}/v1/leases/agent-lost") == 401 ]]
  # A flood from the lease's own token: at most 10 a minute are heard, so 25 more (which
  # may straddle one minute's end) meet refusals.
  local codes=""
  for _ in $(seq 1 25); do codes+=" $(agent_lost "$token" "$LEASE" "$OLD_UUID" | tail -1)"; done
  [[ $codes == *503* ]]
  (($(grep -o 200 <<<"$codes" | wc -l) <= 20))
  # Nothing moved: the GPU is still the lease's, LEASED, generation 1, and both jobs pass.
  [ "$(lease_field_of_job "$JOB" '.generation')" = 1 ]
  [ "$(lease_field_of_job "$JOB" '.gpus[0].uuid')" = "$OLD_UUID" ]
  [ "$(gpupoolctl show gpus "$(lease_field_of_job "$JOB" '.gpus[0].id')" --json | jq -r '.gpus[0].state')" = LEASED ]
  wait_job_end "$JOB" 240
  job_completed_ok "$JOB"
  ! grep -q "recovering" "$OUT/$JOB.out" || false
  wait_job_end "$other_job" 240
  job_completed_ok "$other_job"
  no_node_drained
}

@test "with GPUPOOL_FAILOVER=off a failed GPU gives the program the CUDA error, and no node drains" {
  start_and_wait tcp GPUPOOL_FAILOVER=off
  # Its processes cannot follow a move: a drain leaves its GPU DRAINING under it.
  [ "$(lease_field_of_job "$JOB" '.movable')" = false ]
  DRAINED=("$FAILED_GPU")
  gpupoolctl update gpu="$FAILED_GPU" state=drain reason="failover test" >/dev/null
  [ "$(gpupoolctl show gpus "$FAILED_GPU" --json | jq -r '.gpus[0].state')" = DRAINING ]
  [ "$(lease_field_of_job "$JOB" '.gpus[0].id')" = "$FAILED_GPU" ]
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="failover test" >/dev/null
  wait_job_end "$JOB" 120
  cat "$OUT/$JOB.out" >&2
  [[ $(job_state "$JOB") == FAILED ]]
  ! grep -q '^iterate: PASS' "$OUT/$JOB.out" || false
  grep -qE 'failed: .*\((214|46|800)\)' "$OUT/$JOB.out"
  ! grep -q 'recovered on' "$OUT/$JOB.out" || false
  no_node_drained
}

@test "a running program's GPU hangs: the agent's watchdog and probe fail it and the program goes on" {
  start_and_wait tcp
  local host index
  host=$(lease_field_of_job "$JOB" '.gpus[0].host')
  index=$(lease_field_of_job "$JOB" '.gpus[0].index')
  HUNG="$host $index"
  fault "$host" "$index" hang
  expect_recovered
  # The watchdog (hang_timeout = 5 in the dev cluster) saw no progress, and the probe on a
  # fresh session did not finish either: only then is the GPU FAILED.
  agent_logs | grep -qE "GPU $OLD_UUID reported FAILED: no progress for [5-9]\.[0-9] s, and the health probe on a fresh session failed: the probe did not finish"
}

@test "a GPU fails while the pool has no spare: the program waits, and goes on when an admin resumes one" {
  start_and_wait tcp
  # Every other a100 GPU drained: nothing to swap in.
  local gpu
  for gpu in $(gpupoolctl show gpus pool=a100 --json | jq -r '.gpus[] | select(.state == "IDLE") | .id'); do
    gpupoolctl update gpu="$gpu" state=drain reason="failover test: no spare" >/dev/null
    DRAINED+=("$gpu")
  done
  ((${#DRAINED[@]} > 0))
  # The GPU fails in band (an Xid, say): its requests fail, and the lease, with no spare,
  # stays DEGRADED on it.
  local host index
  host=$(lease_field_of_job "$JOB" '.gpus[0].host')
  index=$(lease_field_of_job "$JOB" '.gpus[0].index')
  HUNG="$host $index"
  fault "$host" "$index" fail
  wait_until 30 grep -q "failed (CUDA error [0-9]*): recovering" "$OUT/$JOB.out"
  sleep 6
  # Still waiting, not failed: the lease is DEGRADED and the job runs on.
  [[ $(job_state "$JOB") == RUNNING ]]
  ! grep -q 'recovered on' "$OUT/$JOB.out" || false
  grep -q "still waiting for a replacement GPU" "$OUT/$JOB.out"
  gpupoolctl update gpu="${DRAINED[0]}" state=resume reason="failover test: a spare" >/dev/null
  expect_recovered
  grep -q "recovered on $(uuid_of_gpu "${DRAINED[0]}")" "$OUT/$JOB.out"
}

@test "both GPUs of a 2-GPU lease fail one after the other: the program goes on on two new GPUs" {
  GPUS=2 ITERATE_ARGS="400 20 2 8 2" start_and_wait tcp
  local second
  second=$(lease_field_of_job "$JOB" '.gpus[1].id')
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="failover test" >/dev/null
  wait_until 60 grep -q "GPU 0: recovered on" "$OUT/$JOB.out"
  gpupoolctl update gpu="$second" state=fail reason="failover test" >/dev/null
  wait_job_end "$JOB" 240
  gpupoolctl update gpu="$second" state=resume reason="failover test" >/dev/null
  job_completed_ok "$JOB"
  grep -q '^iterate: PASS (400 iterations, 2 MiB state, 8 MiB written once, 2 device(s))' "$OUT/$JOB.out"
  grep -q "GPU 1: recovered on" "$OUT/$JOB.out"
  [[ $(events_of_job "$JOB" | grep -cx swapped) -eq 2 ]]
  no_node_drained
}

# A planned move went agent to agent: PASS, COMPLETED 0:0, the move logged by the library
# with the bytes the new GPU's agent copied from the old one's, and in gpupoold's events.
expect_moved() {
  wait_job_end "$JOB" 240
  job_completed_ok "$JOB"
  grep -q '^iterate: PASS' "$OUT/$JOB.out"
  grep -q "GPU 0 ($OLD_UUID): the lease moved to another GPU; moving there with its memory" "$OUT/$JOB.out"
  local line new_uuid
  line=$(grep -o 'GPU 0: moved to GPU-[^ ]* at [^ ]* in [0-9]* ms (memory copied agent to agent: [0-9.]* [KMG]iB' "$OUT/$JOB.out" | tail -1)
  [[ -n $line ]]
  new_uuid=$(awk '{print $5}' <<<"$line")
  [[ $new_uuid != "$OLD_UUID" ]]
  # Nothing came from the checkpoint.
  ! grep -q 'recovered on' "$OUT/$JOB.out" || false
  agent_saw_client "$LEASE" "$new_uuid"
  events_of_job "$JOB" | grep -qx migrated
  gpupoolctl show events job="$JOB" --json |
    jq -e '.events[] | select(.type == "recovered") | select(.detail | test("moved here from '"$OLD_UUID"', its memory copied agent to agent: paused [0-9]+ ms, copied [0-9.]+ MiB"))' >/dev/null
  no_node_drained
}

@test "an admin migrates a running program's lease: its memory moves agent to agent, the program goes on, the old GPU is free" {
  start_and_wait tcp
  local old=$FAILED_GPU
  FAILED_GPU=""
  run gpupoolctl migrate lease="$LEASE" reason="failover test" -o
  [ "$status" -eq 0 ]
  [[ $output == *"Generation=2"* ]]
  [ "$(gpupoolctl show gpus "$old" --json | jq -r '.gpus[0].state')" = IDLE ]
  expect_moved
}

@test "an admin drains a running program's GPU: the lease and the memory move at once, the program goes on, the GPU is DRAINED" {
  start_and_wait tcp
  [ "$(lease_field_of_job "$JOB" '.movable')" = true ]
  DRAINED=("$FAILED_GPU")
  FAILED_GPU=""
  run gpupoolctl update gpu="${DRAINED[0]}" state=drain reason="failover test" -o
  [ "$status" -eq 0 ]
  [[ $output == *"State=DRAINED"* ]]
  [ "$(lease_field_of_job "$JOB" '.generation')" = 2 ]
  expect_moved
}
