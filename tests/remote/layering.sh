#!/bin/bash
# The rooms of remote/ depend only downward (docs/architecture.md): each room below may
# include only the rooms named for it here. Fails naming every include that points up.
set -euo pipefail
root=${1:?usage: layering.sh SOURCE_DIR}
cd "$root"
# room: the remote/ rooms its files may include (besides itself, common/ and system headers)
declare -A allowed=(
  [remote/protocol]=""
  [remote/image]=""
  [remote/ptx]="remote/protocol"
  [remote/device]="remote/protocol"
  [remote/devices/sim]="remote/device remote/protocol remote/ptx remote/image"
  [remote/devices/cuda]="remote/device remote/protocol remote/image"
  [remote/dataplane]="remote/device remote/protocol remote/transport"
  [remote/nvml]="remote/protocol remote/transport"
  # The replacement libcuda.so.1 is loaded into applications: it speaks the wire contract
  # over the transport's client end and links nothing of the GPU host's end (no dataplane,
  # device or worker code); of the NVRTC shim it knows only the symbol it looks up.
  [remote/client]="remote/protocol remote/transport remote/image remote/nvrtc/nvrtc_ptx.h"
  # Inside the PTX engine (docs/architecture.md): one front end both tiers consume, the
  # files both tiers share (launch.h, memory.h, and bits.h, rounding.h, half_float.h,
  # matrix_ops.h, texture.h, tensor_copy.h, device_heap.h and device_printf.h: compiled code
  # finds bits, rounds, converts, multiplies matrices, samples, copies tensors, allocates and
  # prints with the interpreter's own code), and launch.cc above
  # both, choosing the tier.
  [remote/ptx/front]="remote/ptx/ptx_engine.h remote/protocol"
  # ir/ (the decoded kernel, its modes and opcode table) sits on the front end alone.
  [remote/ptx/ir]="remote/ptx/front"
  [remote/ptx/interp]="remote/ptx/ir remote/ptx/front remote/ptx/launch.h remote/ptx/memory.h remote/ptx/bits.h remote/ptx/rounding.h remote/ptx/min_max.h remote/ptx/half_float.h remote/ptx/matrix_ops.h remote/ptx/device_heap.h remote/ptx/device_printf.h remote/ptx/texture.h remote/ptx/tensor_copy.h remote/ptx/ptx_engine.h remote/protocol"
  [remote/ptx/jit]="remote/ptx/front remote/ptx/ir remote/ptx/launch.h remote/ptx/memory.h remote/ptx/bits.h remote/ptx/rounding.h remote/ptx/min_max.h remote/ptx/half_float.h remote/ptx/matrix_ops.h remote/ptx/device_heap.h remote/ptx/device_printf.h remote/ptx/texture.h remote/ptx/tensor_copy.h remote/ptx/ptx_engine.h remote/protocol"
  [remote/ptx/launch.h]="remote/ptx/ptx_engine.h"
  [remote/ptx/memory.h]="remote/ptx/ptx_engine.h"
  [remote/ptx/memory.cc]="remote/ptx/memory.h remote/ptx/ptx_engine.h"
  [remote/ptx/texture.h]="remote/protocol"
  [remote/ptx/bits.h]=""
  [remote/ptx/min_max.h]=""
  [remote/ptx/device_heap.h]=""
  [remote/ptx/device_heap.cc]="remote/ptx/device_heap.h"
  [remote/ptx/device_printf.h]=""
  [remote/ptx/device_printf.cc]="remote/ptx/device_printf.h remote/ptx/ptx_engine.h"
  [remote/ptx/bits.cc]="remote/ptx/bits.h"
  [remote/ptx/rounding.h]="remote/ptx/ir"
  [remote/ptx/half_float.h]="remote/ptx/ir"
  [remote/ptx/half_float.cc]="remote/ptx/half_float.h remote/ptx/ir remote/ptx/min_max.h remote/ptx/rounding.h"
  [remote/ptx/matrix_ops.h]="remote/ptx/ir"
  [remote/ptx/matrix_ops.cc]="remote/ptx/matrix_ops.h remote/ptx/ir remote/ptx/half_float.h"
  [remote/ptx/rounding.cc]="remote/ptx/rounding.h remote/ptx/ir"
  [remote/ptx/texture.cc]="remote/ptx/texture.h remote/protocol"
  [remote/ptx/tensor_copy.h]="remote/ptx/texture.h remote/protocol"
  [remote/ptx/tensor_copy.cc]="remote/ptx/tensor_copy.h remote/ptx/texture.h remote/protocol"
)
bad=0
for room in "${!allowed[@]}"; do
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*"(remote\/[^"]*)".*/\1/' <<<"$include")
    ok=0
    for may in "$room" ${allowed[$room]}; do
      # a room's own files, or a room it may use (remote/device is not remote/devices)
      # (a room may also be one file: remote/ptx/launch.h)
      if [[ $target == "$may"/* || $target == "$may" ]]; then ok=1; fi
    done
    if [[ $room == remote/device && $target == remote/devices/* ]]; then ok=0; fi
    if (( ! ok )); then
      echo "$file:$line: $room includes $target, which is not below it"
      bad=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' '^#include "remote/' "$room" /dev/null || true)
done
# jit/'s private headers (internal.h: the Context ABI and CompiledKernel; emitter.h) are
# included only inside jit/: the tier's interface is jit.h.
if grep -rn --include='*.h' --include='*.cc' --include='*.cu' \
  '^#include "remote/ptx/jit/\(internal\|emitter\)\.h"' remote tests scripts 2>/dev/null |
  grep -v '^remote/ptx/jit/'; then
  echo "jit/internal.h and jit/emitter.h are private to remote/ptx/jit/ (include jit/jit.h)"
  bad=1
fi
# The dataplane reaches a device kind only through remote/device/device_kind.h.
if grep -rn 'name() == "cuda"\|name() == "sim"' remote/dataplane remote/device; then
  echo "the executor is chosen by comparing a backend's name, not through its device kind"
  bad=1
fi
# The decoded kernel is the engine's own: no room outside remote/ptx/ includes remote/ptx/ir/
# (remote/devices/sim may use the engine, through ptx_engine.h).
if grep -rn --include='*.h' --include='*.cc' '^#include "remote/ptx/ir/' remote | grep -v '^remote/ptx/'; then
  echo "remote/ptx/ir/ is included from outside the PTX engine"
  bad=1
fi
(( bad == 0 )) && echo "remote/: every include points down"
exit "$bad"
