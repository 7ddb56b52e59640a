# Sourced by the data-path test scripts (run_with_server.sh, kill_client.sh,
# failover_agent.sh, driver/clean_close.sh): the options they share and the wait for a
# test server to listen.

# test_server_option OPTION VALUE: sets server, lib, transport or port from --server,
# --lib, --transport or --port (the caller then shifts 2); returns 1 for any other option.
test_server_option() {
  case "$1" in
    --server) server=$2 ;;
    --lib) lib=$2 ;;
    --transport) transport=$2 ;;
    --port) port=$2 ;;
    *) return 1 ;;
  esac
}

# new_token: 32 random hex digits, the lease token of one test's server.
new_token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# wait_listening PID OUT ERR [NAME]: waits up to 5 s for the server PID to print
# "listening on" to OUT; when it does not (or dies), prints ERR and exits 1.
wait_listening() {
  for _ in $(seq 1 100); do
    grep -q "^listening on" "$2" 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "^listening on" "$2" 2>/dev/null && return 0
  echo "test server${4:+ $4} did not start:" >&2
  cat "$3" >&2
  exit 1
}
