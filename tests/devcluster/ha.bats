#!/usr/bin/env bats
# gpupoold high availability on the dev cluster (GPUPOOL_DEV_HA=1: a 3-member etcd and two
# gpupoold replicas): the replicas say who leads, and jobs submitted across a kill -9 of the
# leader start normally with their leases, while no node drains.
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
