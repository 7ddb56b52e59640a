#!/bin/bash
# tests/remote/layering.sh fails, naming file and line, on a copy of remote/ given a breach
# of each rule the rooms add beyond "only downward": ir/ including the interpreter above it,
# the PTX front end including the decoded kernel (ir/) above it, a room outside remote/ptx/
# (the sim device) including the decoded kernel, and remote/client/ including the GPU host's
# end of the data path (the dataplane), as it did through the protocol's old forwarding
# header.
# Usage: layering_catches.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layering_catches.sh SOURCE_DIR}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$root/remote" "$copy/"
sed -i '1i #include "remote/ptx/interp/internal.h"' "$copy/remote/ptx/ir/modes.h"
sed -i '1i #include "remote/ptx/ir/kernel.h"' "$copy/remote/ptx/front/module.cc"
sim_file=$(cd "$copy" && ls remote/devices/sim/*.cc | head -n 1)
sed -i '1i #include "remote/ptx/ir/kernel.h"' "$copy/$sim_file"
sed -i '1i #include "remote/dataplane/server.h"' "$copy/remote/client/core/log.cc"

# layering.sh must fail, and name each breach.
if out=$("$root/tests/remote/layering.sh" "$copy" 2>&1); then
  echo "$out"
  echo "FAIL: layering.sh passed a tree with four breaches"
  exit 1
fi
echo "$out"
missing=0
for line in "remote/ptx/ir/modes.h:1: remote/ptx/ir includes remote/ptx/interp/internal.h, which is not below it" \
  "remote/ptx/front/module.cc:1: remote/ptx/front includes remote/ptx/ir/kernel.h, which is not below it" \
  "$sim_file:1:#include \"remote/ptx/ir/kernel.h\"" "remote/ptx/ir/ is included from outside the PTX engine" \
  "remote/client/core/log.cc:1: remote/client includes remote/dataplane/server.h, which is not below it"; do
  grep -qF -- "$line" <<<"$out" || { echo "FAIL: expected: $line"; missing=1; }
done
((missing == 0)) && echo "layering.sh names each breach of the rooms' own rules"
exit "$missing"
