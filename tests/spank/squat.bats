#!/usr/bin/env bats
# Lease ownership with two real unix users (root and nobody): a user may acquire a lease
# only for a job that Slurm says is theirs, so nobody can squat on another user's job; and
# nobody, root included, leases a job more than the gpupool_<pool> licences Slurm
# allocated it (issue 37), so no lease goes around the scheduler.

load ../lib/helpers

NOBODY_UID=$(id -u nobody)

# acquire_as_nobody JOB [COUNT]: sets CODE and BODY from POST /v1/leases for JOB (COUNT
# a100 GPUs, 1 if not given) as nobody.
acquire_as_nobody() {
  local body="{\"job_id\":$1,\"request\":[{\"pool\":\"a100\",\"count\":${2:-1}}]}" out
  out=$(runuser -u nobody -- env MUNGE_SOCKET="$MUNGE_SOCKET" BODY="$body" URL="$GPUPOOL_SERVER" sh -c \
    'cred=$(printf gpupool | munge -S "$MUNGE_SOCKET") || exit 9
     curl -s -w "\n%{http_code}" -X POST -H "Authorization: MUNGE $cred" \
       -H "Content-Type: application/json" -d "$BODY" "$URL/v1/leases"')
  CODE=$(tail -n1 <<<"$out")
  BODY=$(sed '$d' <<<"$out")
}

# acquire_as_root JOB COUNT: the same as root, on behalf of nobody (as spank_gpupool does).
acquire_as_root() {
  local out
  out=$(curl -s -w "\n%{http_code}" -X POST -H "Authorization: MUNGE $(munge -n -S "$MUNGE_SOCKET" -s gpupool)" \
    -H "Content-Type: application/json" \
    -d "{\"job_id\":$1,\"request\":[{\"pool\":\"a100\",\"count\":$2}],\"uid\":$NOBODY_UID}" \
    "$GPUPOOL_SERVER/v1/leases")
  CODE=$(tail -n1 <<<"$out")
  BODY=$(sed '$d' <<<"$out")
}

submit_as_nobody() {
  su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch --parsable -o /dev/null $*" | cut -d';' -f1
}

@test "a user cannot acquire a lease for another user's job, and the job gets its own" {
  id=$(submit --hold --gpu-pool=a100:1 --wrap 'echo LEASE=$GPUPOOL_LEASE_ID')
  acquire_as_nobody "$id"
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "belongs to uid 0" <<<"$BODY"
  job_has_no_lease "$id"
  scontrol release "$id"
  wait_until 60 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  # The job ran on a lease of its own user's, not a squatter's.
  lease=$(sed -n 's/^LEASE=//p' "$OUT/$id.out")
  [ -n "$lease" ]
  gpupoolctl show events job="$id" --json | jq -e --arg l "$lease" \
    '[.events[] | select(.type == "leased" and .lease == $l)] | length == 1'
  no_node_drained
}

@test "a user cannot acquire a lease for a job that does not exist yet" {
  acquire_as_nobody 999999
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "not a pending or running Slurm job" <<<"$BODY"
}

@test "a CPU-only job gets no lease from its user or from root: it holds no gpupool licences" {
  # No --gpu-pool: Slurm allocated it no gpupool_a100 licence (Licenses=(null)).
  id=$(submit_as_nobody --wrap "'sleep 60'")
  [ -n "$id" ]
  wait_until 30 job_running "$id"
  acquire_as_nobody "$id" 8
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "job $id holds no gpupool licences (Slurm: Licenses=(null))" <<<"$BODY"
  acquire_as_root "$id" 1
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "job $id holds no gpupool licences" <<<"$BODY"
  job_has_no_lease "$id"
  scancel "$id"
}

@test "a user gets their own job's lease, never more than its licences, and its steps share it" {
  dir=$(mktemp -d) && chmod 777 "$dir"
  # The batch step leases a100:1 (spank_gpupool, as root for nobody); two srun steps and
  # the user's own acquire get the same lease.
  cat >"$dir/job.sh" <<EOF
#!/bin/sh
echo B=\$GPUPOOL_LEASE_ID
srun -n1 sh -c 'echo S=\$GPUPOOL_LEASE_ID'
srun -n1 sh -c 'echo S=\$GPUPOOL_LEASE_ID'
touch $dir/steps-done
sleep 60
EOF
  id=$(su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch --parsable -o $dir/%j.out --gpu-pool=a100:1 $dir/job.sh" |
    cut -d';' -f1)
  [ -n "$id" ]
  wait_until 60 test -e "$dir/steps-done"
  cat "$dir/$id.out"
  lease=$(lease_field_of_job "$id" .id)
  [ -n "$lease" ]
  [ "$(grep -c "^[BS]=$lease\$" "$dir/$id.out")" = 3 ]
  acquire_as_nobody "$id" 1
  echo "$CODE $BODY"
  [ "$CODE" = 200 ]
  [ "$(jq -r .lease.id <<<"$BODY")" = "$lease" ]
  [ "$(jq -r .created <<<"$BODY")" = false ]
  [ "$(jq -r .lease.uid <<<"$BODY")" = "$NOBODY_UID" ]
  # Beyond the job's one licence: refused, for its user and for root alike.
  acquire_as_nobody "$id" 2
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "job $id holds 1 gpupool_a100 licences, 2 GPUs of pool 'a100' requested" <<<"$BODY"
  acquire_as_root "$id" 3
  echo "$CODE $BODY"
  [ "$CODE" = 403 ]
  grep -q "job $id holds 1 gpupool_a100 licences" <<<"$BODY"
  [ "$(lease_count_of_job "$id")" = 1 ]
  gpupoolctl show events job="$id" --json | jq -e '[.events[] | select(.type == "leased")] | length == 1'
  scancel "$id"
  wait_until 30 job_has_no_lease "$id"
  rm -rf "$dir"
}

@test "a user's own pending job gets no lease from them: it gets one when it starts" {
  id=$(submit_as_nobody --hold --gpu-pool=a100:1 --wrap true)
  [ -n "$id" ]
  acquire_as_nobody "$id"
  echo "$CODE $BODY"
  [ "$CODE" = 409 ]
  grep -q "job $id is pending: its lease is acquired when it starts" <<<"$BODY"
  job_has_no_lease "$id"
  scancel "$id"
}
