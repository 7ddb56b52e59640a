#!/usr/bin/env bats
# scripts/devcluster.d/parts.sh on its own, with no cluster: how it tells its parts' processes
# from dead ones and strangers. Needs: PARTS_SH (path of parts.sh).

setup() {
  : "${PARTS_SH:?set PARTS_SH to scripts/devcluster.d/parts.sh}"
  DEVDIR=$BATS_TEST_TMPDIR/dev
  PIDDIR=$DEVDIR/run
  LOGDIR=$DEVDIR/log
  mkdir -p "$PIDDIR" "$LOGDIR"
  # shellcheck disable=SC1090
  . "$PARTS_SH"
  # chain N MARK: execs itself N times (each with MARK, a path under DEVDIR, among its
  # arguments, as every part's command line has), then lives a moment more.
  CHAIN=$BATS_TEST_TMPDIR/chain
  cat >"$CHAIN" <<'SH'
#!/bin/sh
[ "$1" -gt 0 ] && exec /bin/sh "$0" $(($1 - 1)) "$2"
sleep 0.3
SH
}

teardown() {
  [[ -z ${child:-} ]] || kill "$child" 2>/dev/null || true
}

# Is pid $1 alive and not a zombie?
running() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s%% *} != Z ]]
}

@test "a part in the middle of an exec is never called dead (munge's exec chain on a loaded CI)" {
  /bin/sh "$CHAIN" 2000 "$DEVDIR/mark" &
  child=$!
  echo "$child" >"$PIDDIR/munge.pid"
  local checks=0 wrong=0
  while running "$child"; do
    checks=$((checks + 1))
    if ! got=$(part_pid munge); then
      # Only a process that is still there afterwards was called dead wrongly.
      running "$child" && wrong=$((wrong + 1))
    elif [[ $got != "$child" ]]; then
      echo "part_pid printed '$got', not $child"
      return 1
    fi
  done
  echo "checks=$checks called dead while running=$wrong"
  ((checks > 20))
  ((wrong == 0))
}

@test "a dead part, a stranger in its pid and a bad pid file are not ours" {
  sleep 30 &
  child=$!
  echo "$child" >"$PIDDIR/munge.pid"
  # sleep's command line does not name DEVDIR: a recycled pid, a stranger.
  run part_pid munge
  [ "$status" -eq 1 ] && [ -z "$output" ]
  kill "$child"
  wait "$child" 2>/dev/null || true
  run part_pid munge
  [ "$status" -eq 1 ]
  echo "not-a-pid" >"$PIDDIR/munge.pid"
  run part_pid munge
  [ "$status" -eq 1 ]
  rm "$PIDDIR/munge.pid"
  run part_pid munge
  [ "$status" -eq 1 ]
}

@test "a zombie (exited, not yet reaped) is called dead within two seconds" {
  # The zombie's parent becomes a sleep, which never waits for it; the child outlives the
  # shell's exec, so the shell cannot reap it first.
  sh -c "sh -c 'sleep 0.3; exit 0' $DEVDIR/mark & echo \$! >$PIDDIR/munge.pid; exec sleep 5" &
  child=$!
  local i=0
  while ! [[ -s $PIDDIR/munge.pid ]] && ((i++ < 100)); do sleep 0.02; done
  local zombie
  zombie=$(cat "$PIDDIR/munge.pid")
  i=0
  while running "$zombie" && ((i++ < 100)); do sleep 0.02; done
  [[ $(cut -d' ' -f3 "/proc/$zombie/stat") == Z ]]
  local start=$SECONDS
  run part_pid munge
  [ "$status" -eq 1 ]
  ((SECONDS - start <= 2))
}
