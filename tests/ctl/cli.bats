#!/usr/bin/env bats
# The gpupoolctl binary as an admin meets it: exit codes, one-line errors, the usage hint,
# the config and environment it reads. No daemon is needed: nothing listens on the ports
# used here (25990-25999, engineer C's range), so requests fail with "cannot reach".

setup() {
  : "${GPUPOOLCTL:?set GPUPOOLCTL to the gpupoolctl binary}"
  TMP=$(mktemp -d /tmp/c-ctl-cli.XXXXXX)
  # Keep the machine's own config and environment out of the test.
  unset GPUPOOL_SERVER GPUPOOL_CONF
  export GPUPOOL_CONF="$TMP/gpupool.conf"
  printf 'client = { server = "http://127.0.0.1:25999"; timeout = 2; };\n' >"$GPUPOOL_CONF"
}

teardown() {
  rm -rf "$TMP"
}

@test "no command: exit 2, one error line and a usage hint" {
  run "$GPUPOOLCTL"
  [ "$status" -eq 2 ]
  [ "${lines[0]}" = "gpupoolctl: error: no command given" ]
  [[ "${lines[1]}" == *"--help"* ]]
}

@test "--help prints usage on stdout and exits 0" {
  run "$GPUPOOLCTL" --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"show events [gpu=ID] [job=N] [since=SEQ] [limit=K]"* ]]
}

@test "unknown command, misspelt key, bad state and non-numeric job exit 2 before any request" {
  run "$GPUPOOLCTL" frobnicate
  [ "$status" -eq 2 ]
  [ "${lines[0]}" = "gpupoolctl: error: unknown command 'frobnicate' (expected show, update, release, migrate or ping)" ]
  run "$GPUPOOLCTL" update gpuu=gpuhost1:0 state=drain
  [ "$status" -eq 2 ]
  [[ "${lines[0]}" == "gpupoolctl: error: unknown key 'gpuu' for 'update'"* ]]
  run "$GPUPOOLCTL" update gpu=gpuhost1:0 state=sleep
  [ "$status" -eq 2 ]
  [[ "${lines[0]}" == *"bad state 'sleep'"* ]]
  run "$GPUPOOLCTL" release job=forty-two
  [ "$status" -eq 2 ]
  [[ "${lines[0]}" == *"not 'forty-two'"* ]]
  # None of these reached for the (absent) daemon.
  [[ "$output" != *"cannot reach"* ]]
}

@test "unreachable daemon: exit 1 and one line naming the address from the config" {
  run "$GPUPOOLCTL" ping
  [ "$status" -eq 1 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "${lines[0]}" == "gpupoolctl: error: cannot reach gpupoold at http://127.0.0.1:25999"* ]]
  run "$GPUPOOLCTL" show pools
  [ "$status" -eq 1 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "${lines[0]}" == *"cannot reach gpupoold at http://127.0.0.1:25999"* ]]
}

@test "server precedence: --server over GPUPOOL_SERVER over client.server" {
  GPUPOOL_SERVER=http://127.0.0.1:25998 run "$GPUPOOLCTL" ping
  [ "$status" -eq 1 ]
  [[ "$output" == *"http://127.0.0.1:25998"* ]]
  GPUPOOL_SERVER=http://127.0.0.1:25998 run "$GPUPOOLCTL" --server 127.0.0.1:25997 ping
  [ "$status" -eq 1 ]
  [[ "$output" == *"127.0.0.1:25997"* ]]
}

@test "a broken config names file, line and key; exit 1" {
  printf '# comment\nclient = { server = "x"; tiemout = 3; };\n' >"$TMP/bad.conf"
  run "$GPUPOOLCTL" -f "$TMP/bad.conf" ping
  [ "$status" -eq 1 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "${lines[0]}" == "gpupoolctl: error: $TMP/bad.conf:2: client.tiemout: unknown key"* ]]
}

@test "a named config that does not exist is an error" {
  run "$GPUPOOLCTL" -f "$TMP/missing.conf" ping
  [ "$status" -eq 1 ]
  [[ "${lines[0]}" == *"$TMP/missing.conf"* ]]
}
