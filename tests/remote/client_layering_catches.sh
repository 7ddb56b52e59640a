#!/bin/bash
# client_layering.sh fails, naming file and line, on a copy of remote/client/ given one
# breach of each rule: an upward include, a self-call of an exported function below api/,
# and an entry point defined outside api/.
# Usage: client_layering_catches.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: client_layering_catches.sh SOURCE_DIR}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir -p "$copy/remote"
cp -r "$root/remote/client" "$copy/remote/"
client=$copy/remote/client
sed -i '1i #include "remote/client/graph/graphs.h"' "$client/core/log.cc"
echo 'CUresult Breach() { return cuMemFree_v2(0); }' >>"$client/ops/memory.cc"
echo 'GPUPOOL_CUDA_API CUresult CUDAAPI cuBreach() { return CUDA_SUCCESS; }' >>"$client/ops/stream.cc"
lines=$(wc -l <"$client/ops/memory.cc")
stream_lines=$(wc -l <"$client/ops/stream.cc")

status=0
out=$("$root/tests/remote/client_layering.sh" "$copy" 2>&1) || status=$?
echo "$out"
fail=0
expect() {
  if ! grep -qF -- "$1" <<<"$out"; then
    echo "FAIL: expected: $1"
    fail=1
  fi
}
if (( status == 0 )); then
  echo "FAIL: client_layering.sh passed a tree with three breaches"
  fail=1
fi
expect "remote/client/core/log.cc:1: core/ includes graph/, which is not below it"
expect "remote/client/ops/memory.cc:$lines: calls the exported cuMemFree_v2"
expect "remote/client/ops/stream.cc:$stream_lines: defines an exported function outside api/"
(( fail == 0 )) && echo "client_layering.sh names each breach"
exit "$fail"
