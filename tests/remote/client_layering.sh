#!/bin/bash
# The layers of remote/client/ (docs/architecture.md) call only downward:
#   api/ -> graph/ -> ops/ -> core/ -> failover/
# Checks, naming every file:line that breaks a rule:
#  1. a layer includes only the client layers below it (failover/ uses only core/'s logger);
#  2. no code under core/, ops/, graph/ or failover/ calls an exported cu* function: the
#     library's entry points are the application's, and a layer below api/ calls the one
#     implementation in ops/ instead;
#  3. exported functions (GPUPOOL_CUDA_API, extern "C") are defined only under api/.
# Usage: client_layering.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: client_layering.sh SOURCE_DIR}
cd "$root/remote/client"

# layer: the client layers its files may include besides their own
declare -A below=(
  [api]="graph ops core"
  [graph]="ops core"
  [ops]="core"
  [core]="failover"
  [failover]=""
)
bad=0
for layer in "${!below[@]}"; do
  if [[ ! -d $layer ]]; then
    echo "remote/client/$layer/: missing"
    bad=1
    continue
  fi
  while IFS=: read -r file line text; do
    target=$(sed -E 's/.*"remote\/client\/([^/"]*)\/.*/\1/' <<<"$text")
    ok=0
    for may in "$layer" ${below[$layer]}; do
      if [[ $target == "$may" ]]; then ok=1; fi
    done
    if [[ $layer == failover && $text == *'"remote/client/core/log.h"'* ]]; then ok=1; fi
    # The library's own lists at remote/client/ (driver_names.inc): for the entry points.
    if [[ $layer == api && $text =~ \"remote/client/[^/]*\" ]]; then ok=1; fi
    if (( ! ok )); then
      echo "remote/client/$file:$line: $layer/ includes $target/, which is not below it"
      bad=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' '^#include "remote/client/' "$layer" || true)
done

# Code only: // comments and the insides of string literals blanked, line numbers kept.
code_of() { sed -e 's://.*$::' -e 's/"\([^"\\]\|\\.\)*"/""/g' "$1"; }

for layer in core ops graph failover; do
  while IFS= read -r file; do
    # 2. A call: cu, a capital letter, a name, an opening parenthesis; not a definition.
    while IFS=: read -r line text; do
      [[ $text == *GPUPOOL_CUDA_API* ]] && continue
      name=$(grep -o -P '(?<![\w])cu[A-Z]\w*(?=\s*\()' <<<"$text" | head -1)
      echo "remote/client/$file:$line: calls the exported $name; a layer below api/ calls ops/ or core/"
      bad=1
    done < <(code_of "$file" | grep -n -P '(?<![\w])cu[A-Z]\w*\s*\(' || true)
    # 3. An entry point defined outside api/.
    while IFS=: read -r line text; do
      echo "remote/client/$file:$line: defines an exported function outside api/"
      bad=1
    done < <(code_of "$file" | grep -n '^GPUPOOL_CUDA_API\|^extern "C"' || true)
  done < <(find "$layer" -name '*.cc' -o -name '*.h' | sort)
done

if (( bad == 0 )); then
  echo "remote/client/: every include and call points down; entry points only in api/"
fi
exit "$bad"
