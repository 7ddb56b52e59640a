#!/bin/bash
# tests/remote/layering.sh fails, naming file and line, on a copy of remote/ given a breach
# of the client's room: remote/client/ including the GPU host's end of the data path (the
# dataplane), as it did through the protocol's old forwarding header.
# Usage: layering_catches.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layering_catches.sh SOURCE_DIR}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$root/remote" "$copy/"
sed -i '1i #include "remote/dataplane/server.h"' "$copy/remote/client/core/log.cc"

# layering.sh must fail, and name the breach.
if out=$("$root/tests/remote/layering.sh" "$copy" 2>&1); then
  echo "$out"
  echo "FAIL: layering.sh passed a tree whose client includes the dataplane"
  exit 1
fi
echo "$out"
expected="remote/client/core/log.cc:1: remote/client includes remote/dataplane/server.h, which is not below it"
if ! grep -qF -- "$expected" <<<"$out"; then
  echo "FAIL: expected: $expected"
  exit 1
fi
echo "layering.sh names the client's include of the dataplane"
