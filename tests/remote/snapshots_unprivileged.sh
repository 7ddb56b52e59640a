#!/bin/bash
# Copy-on-write snapshots of page-locked memory, tried as a user who may not take them:
# nobody, where vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is root's alone (the
# kernel's defaults). The library opens no userfaultfd that handles only user-mode faults
# (the kernel's own writes into the memory would fail with EFAULT): the registry names why
# it is off, takes no snapshot, and the journal copies the uploads instead, so a replay
# still gives the bytes the GPU got. The same tests run three times as nobody:
#  - with nothing given: snapshots off, the reason named;
#  - with a descriptor of /dev/userfaultfd that root opened, named in GPUPOOL_USERFAULTFD (as
#    spank_gpupool gives a job's tasks where plugstack.conf says userfaultfd=yes): snapshots
#    on, every test's assertions on snapshots taken and copied hold as for root;
#  - with GPUPOOL_USERFAULTFD naming a descriptor of something else: refused, and named.
# The tests (failover_test: PinnedSnapshotsTest, FailoverTest.UploadsKeptAsSnapshots... and
# FailoverTest.CheckpointsKeepWholeUploadSnapshotsAsImages...) take snapshots as root.
#   snapshots_unprivileged.sh FAILOVER_TEST
set -eu
binary=$1
filter='PinnedSnapshotsTest.*:FailoverTest.UploadsKeptAsSnapshotsReplayTheBytesTheGpuGot:FailoverTest.CheckpointsKeepWholeUploadSnapshotsAsImagesUncopied:FailoverTest.RestoreStreamsSendSnapshotImagesFromThePages'
if [ "$(id -u)" != 0 ]; then
  exec "$binary" --gtest_filter="$filter"
fi
unprivileged=$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)
if [ "$unprivileged" != 0 ]; then
  echo "note: vm.unprivileged_userfaultfd is not 0 here: nobody takes snapshots in every pass" >&2
fi
work=$(mktemp -d /tmp/gpupool-snapshots.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$binary" "$work/failover_test"
chmod 755 "$work" "$work/failover_test"
cd "$work"
# as_nobody NAME EXPECTED CMD-PREFIX...: runs the tests as nobody (after any redirections the
# caller set up), EXPECTED 1 where they must take snapshots; sets OUT.
as_nobody() {
  local name=$1 expected=$2
  shift 2
  OUT=$("$@" setpriv --reuid=nobody --regid=nogroup --clear-groups env TMPDIR=/tmp \
    GPUPOOL_TEST_EXPECT_SNAPSHOTS="$expected" "$work/failover_test" --gtest_filter="$filter" 2>&1) ||
    { echo "$OUT"; echo "$name: failed" >&2; exit 1; }
  # The tests ran (not filtered away), as nobody.
  echo "$OUT" | grep -q "PASSED  \] 9 tests" || { echo "$OUT"; echo "$name: expected 9 tests to pass" >&2; exit 1; }
  echo "$name: $(echo "$OUT" | grep -m1 "snapshots off" || echo "snapshots on")"
}
[ "$unprivileged" = 0 ] && expect_off=0 || expect_off=1
as_nobody "nothing given" "$expect_off" env -u GPUPOOL_USERFAULTFD
if [ "$unprivileged" = 0 ]; then
  echo "$OUT" | grep -q "snapshots off: userfaultfd: " || { echo "$OUT"; exit 1; }
fi
if [ -c /dev/userfaultfd ]; then
  as_nobody "descriptor given" 1 env GPUPOOL_USERFAULTFD=9 9<>/dev/userfaultfd
  ! echo "$OUT" | grep -q "snapshots off" || { echo "$OUT"; exit 1; }
else
  echo "note: no /dev/userfaultfd here (Linux before 6.1): the descriptor pass cannot run" >&2
fi
as_nobody "wrong descriptor" "$expect_off" env GPUPOOL_USERFAULTFD=0 </dev/null
if [ "$unprivileged" = 0 ]; then
  echo "$OUT" | grep -q "GPUPOOL_USERFAULTFD=0 is not a descriptor of /dev/userfaultfd" || { echo "$OUT"; exit 1; }
fi
