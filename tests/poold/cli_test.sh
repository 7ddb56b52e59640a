#!/usr/bin/env bash
# gpupoold refuses to start on a malformed config, naming file, line and key; and on an
# address it cannot bind. Usage: cli_test.sh GPUPOOLD
set -u
gpupoold=$1
dir=$(mktemp -d /tmp/gpupoold-cli.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0

expect_refusal() {  # expect_refusal NAME CONFIG-TEXT EXPECTED-MESSAGE
  printf '%s\n' "$2" > "$dir/$1.conf"
  out=$("$gpupoold" -D -f "$dir/$1.conf" 2>&1)
  rc=$?
  if [[ $rc -eq 0 || $out != *"$3"* ]]; then
    echo "FAIL $1: rc=$rc, output: $out (expected: $3)"
    fail=1
  else
    echo "ok $1: $out"
  fi
}

expect_refusal unknown_key 'gpupoold = { listen = "127.0.0.1:0";
  lisen = "x"; };' "unknown_key.conf:2: gpupoold.lisen: unknown key"
expect_refusal bad_type 'gpupoold = { lease_ttl = "long"; };' "gpupoold.lease_ttl: must be an integer"
expect_refusal duplicate_gpu 'pools = ( { name = "a100"; } );
gpus = ( { gpu = "h1:0"; pool = "a100"; },
         { gpu = "h1:0"; pool = "a100"; } );' "duplicate_gpu.conf:3: gpus[1].gpu: duplicate GPU 'h1:0'"
expect_refusal unknown_pool 'pools = ( { name = "a100"; } );
gpus = ( { gpu = "h1:0"; pool = "v100"; } );' "gpus[0].pool: unknown pool 'v100'"
expect_refusal syntax 'pools = ( { name = "a100" );' "syntax.conf:1:"
expect_refusal bad_durability 'gpupoold = { durability = "sometimes"; };' 'must be "fsync" or "process"'
# A port that is taken: a listener of this test's own holds it.
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' > "$dir/port" &
holder=$!
for _ in $(seq 50); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
port=$(cat "$dir/port")
expect_refusal port_in_use "gpupoold = { listen = \"127.0.0.1:$port\"; state_dir = \"$dir/state\"; slurm_reap = false; };" "cannot listen on 127.0.0.1:$port"
kill "$holder"

out=$("$gpupoold" --bogus 2>&1); rc=$?
if [[ $rc -ne 2 || $out != *"unknown option '--bogus'"* ]]; then echo "FAIL bad option: rc=$rc $out"; fail=1; fi
out=$("$gpupoold" -D -f "$dir/absent.conf" 2>&1); rc=$?
if [[ $rc -eq 0 || $out != *"absent.conf: cannot read config file"* ]]; then echo "FAIL missing file: rc=$rc $out"; fail=1; fi
exit $fail
