#!/usr/bin/env bats
# scripts/chaos against the dev cluster (CTest fixture "devcluster"): two cycles of kill -9
# of gpupoold, an agent and a slurmd under a stream of --gpu-pool jobs, and proof that its
# checks fail when a lease really is lost.
# Needs: CHAOS (path of scripts/chaos); GPUPOOL_DEVDIR, GPUPOOL_DEV_PORTBASE and
# GPUPOOL_BUILD as the fixture used them.

setup() {
  : "${CHAOS:?set CHAOS to scripts/chaos}"
}

# Prints the value of Key= from the output of the last `run`.
figure() { grep -o "^$1=[^ ]*" <<<"$output" | tail -1 | cut -d= -f2; }

@test "two cycles of kill -9: no lease lost, no GPU in two leases, no node drained" {
  run timeout 420 "$CHAOS" --cycles 2 --seed 7
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(figure Result)" = PASS ]
  [ "$(grep -c '^Cycle=' <<<"$output")" -eq 2 ]
  [ "$(grep -c '^Cycle=.*Check=OK' <<<"$output")" -eq 2 ]
  [ "$(figure LeasesLost)" -eq 0 ]
  [ "$(figure GpusInTwoLeases)" -eq 0 ]
  [ "$(figure NodesDrained)" -eq 0 ]
  [ "$(figure LeasesLeft)" -eq 0 ]
  # Jobs ran all the time, and leases were there to check at every kill.
  [ "$(figure JobsSubmitted)" -ge 10 ]
  [ "$(figure JobsCompleted)" -ge 1 ]
  [ "$(figure LeasesChecked)" -ge 1 ]
  # Every job is accounted for: completed, or failed with a reason.
  [ "$(($(figure JobsCompleted) + $(figure JobsFailedWithReason)))" -eq "$(figure JobsSubmitted)" ]
  [[ $(figure PooldRecoveryMaxS) =~ ^[0-9]+\.[0-9]+$ ]]
}

@test "a lease deleted behind gpupoold's back is reported lost and fails the run" {
  # As long as the run above: scripts/chaos itself waits up to 300 s after its last cycle
  # for a job stuck in launch, so a shorter limit killed a run that was about to report.
  run timeout 420 "$CHAOS" --cycles 1 --seed 3 --lose-a-lease
  echo "$output"
  [ "$status" -eq 1 ]
  [ "$(figure Result)" = FAIL ]
  lost=$(figure LostOnPurpose)
  [[ $lost =~ ^L[0-9]+$ ]]
  [ "$(figure LeasesLost)" -eq 1 ]
  grep -q "CHECK FAILED: lease $lost of job [0-9]* was acknowledged before gpupoold was killed and is gone" <<<"$output"
}

@test "bad arguments are refused before anything is killed" {
  run "$CHAOS" --cycles 0
  [ "$status" -eq 2 ]
  [[ $output == *"--cycles must be a whole number from 1 to 10000, not '0'"* ]]
  run "$CHAOS" --cycles
  [ "$status" -eq 2 ]
  [[ $output == *"--cycles needs a value"* ]]
  run "$CHAOS" --frobnicate
  [ "$status" -eq 2 ]
  [[ $output == *"unknown argument '--frobnicate'"* ]]
}
