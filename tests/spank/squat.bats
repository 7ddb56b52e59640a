#!/usr/bin/env bats
# Lease ownership with two real unix users (root and nobody): a user may acquire a lease
# only for a job that Slurm says is theirs, so nobody can squat on another user's job.

load ../lib/helpers

NOBODY_UID=$(id -u nobody)

# acquire_as_nobody JOB: sets CODE and BODY from POST /v1/leases for JOB as nobody.
acquire_as_nobody() {
  local body="{\"job_id\":$1,\"request\":[{\"pool\":\"a100\",\"count\":1}]}" out
  out=$(runuser -u nobody -- env MUNGE_SOCKET="$MUNGE_SOCKET" BODY="$body" URL="$GPUPOOL_SERVER" sh -c \
    'cred=$(printf gpupool | munge -S "$MUNGE_SOCKET") || exit 9
     curl -s -w "\n%{http_code}" -X POST -H "Authorization: MUNGE $cred" \
       -H "Content-Type: application/json" -d "$BODY" "$URL/v1/leases"')
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

@test "a user may acquire a lease for their own running job, owned by them" {
  # No --gpu-pool: the plugin takes no lease for it, so the one nobody asks for is the only one.
  id=$(submit_as_nobody --wrap "'sleep 60'")
  [ -n "$id" ]
  wait_until 30 job_running "$id"
  acquire_as_nobody "$id"
  echo "$CODE $BODY"
  [ "$CODE" = 200 ]
  [ "$(jq -r .lease.uid <<<"$BODY")" = "$NOBODY_UID" ]
  [ "$(lease_field_of_job "$id" .uid)" = "$NOBODY_UID" ]
  scancel "$id"
  wait_until 30 job_has_no_lease "$id"
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
