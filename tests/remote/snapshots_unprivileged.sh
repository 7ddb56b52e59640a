#!/bin/bash
# Copy-on-write snapshots of page-locked memory, tried as a user who may not take them:
# nobody, where vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is root's alone (the
# kernel's defaults). The library opens no userfaultfd that handles only user-mode faults
# (the kernel's own writes into the memory would fail with EFAULT): the registry names why
# it is off, takes no snapshot, and the journal copies the uploads instead, so a replay
# still gives the bytes the GPU got. The same tests as root take snapshots
# (failover_test, PinnedSnapshotsTest and FailoverTest.UploadsKeptAsSnapshots...).
#   snapshots_unprivileged.sh FAILOVER_TEST
set -eu
binary=$1
filter='PinnedSnapshotsTest.*:FailoverTest.UploadsKeptAsSnapshotsReplayTheBytesTheGpuGot'
if [ "$(id -u)" != 0 ]; then
  exec "$binary" --gtest_filter="$filter"
fi
if [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)" != 0 ]; then
  echo "note: vm.unprivileged_userfaultfd is not 0 here: nobody may take snapshots too" >&2
fi
work=$(mktemp -d /tmp/gpupool-snapshots.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$binary" "$work/failover_test"
chmod 755 "$work" "$work/failover_test"
cd "$work"
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env TMPDIR=/tmp "$work/failover_test" \
  --gtest_filter="$filter" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -3
# The tests ran (not filtered away), as nobody.
echo "$out" | grep -q "PASSED  \] 6 tests" || { echo "$out"; echo "expected 6 tests to pass as nobody" >&2; exit 1; }
