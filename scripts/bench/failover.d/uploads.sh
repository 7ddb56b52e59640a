#!/bin/bash
# scripts/bench/failover --uploads: what the journal costs uploads. cudaMemcpy H2D from
# pinned host memory (remote.d/remote_bench.cu, HostToDevice/N) at 64 KiB, 1 MiB, 16 MiB
# and 256 MiB through gpupool's libcuda.so.1 and a dataplane test server, in three modes
# alternating in the same run: GPUPOOL_FAILOVER=replay (an upload of 64 KiB or more from
# page-locked memory kept as a copy-on-write snapshot of its source where the process can
# take one, pinned_snapshots.h), replay with GPUPOOL_COPY_ON_WRITE=off (every uploaded byte
# copied into the journal while it is sent), and GPUPOOL_FAILOVER=off; medians of
# REPETITIONS runs each, with the spread ((max-min)/median) of each side. Then the same
# for cudaMemcpyAsync and cudaStreamSynchronize (HostToDeviceAsync/N, also at 16 KiB: the
# journal holds an upload under 64 KiB by reference and copies it at the wait), and for a
# program that fills its buffer before each upload (HostToDeviceFilled/N, the fill timed
# too: a snapshot's copy is made at the fill's first write).
# Each row runs for at least 1 s: with 0.3 s, loopback TCP on the 2-core dev VM gave
# spreads of +-40-60% and medians of 5 that moved by 15% from run to run.
# Goal (issue 40): replay >= 95% of off at every size.
#   uploads.sh BUILD TRANSPORT REPETITIONS PORT
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
build=$1 transport=$2 repetitions=$3 port=$4
server="$build/bin/gpupool-dataplane-testd"
lib="$build/lib/remoting"
[ -x "$server" ] || { echo "failover --uploads: no $server (build the tree first)" >&2; exit 1; }
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
. "$top/tests/remote/transport_env.sh" "$transport"
work=$(mktemp -d /tmp/gpupool-bench-uploads.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
"$nvcc" -O2 -o "$work/remote_bench" "$here/../remote.d/remote_bench.cu" -lbenchmark -lpthread
"$server" --listen "127.0.0.1:$port" --lease bench --token bench --gpus 1 --memory-mib 4096 \
  >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 1 100); do grep -q "^listening" "$work/server.out" 2>/dev/null && break; sleep 0.05; done
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
sizes="65536 1048576 16777216 268435456"
sizes_of() {
  case $1 in
    HostToDeviceAsync) echo "16384 $sizes" ;;
    HostToDeviceFilled) echo "1048576 16777216" ;;
    *) echo "$sizes" ;;
  esac
}
benches="HostToDevice HostToDeviceAsync HostToDeviceFilled"
orders=("replay copy off" "copy off replay" "off replay copy")  # each mode first in turn
for repetition in $(seq 1 "$repetitions"); do
  for mode in ${orders[$(((repetition - 1) % 3))]}; do
    failover=$mode copy_on_write=on
    [ "$mode" = copy ] && failover=replay copy_on_write=off
    GPUPOOL_GPUS="GPU-5e1f0a11-0000-4000-8000-000000000000@127.0.0.1:$port" GPUPOOL_LEASE_ID=bench \
      GPUPOOL_LEASE_TOKEN=bench CUDA_VISIBLE_DEVICES=0 GPUPOOL_FAILOVER=$failover GPUPOOL_CHECKPOINT_MEM=4G \
      GPUPOOL_COPY_ON_WRITE=$copy_on_write LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$work/remote_bench" --benchmark_filter='^HostToDevice(Async|Filled)?/' --benchmark_format=csv \
      --benchmark_min_time=1 >"$work/run.csv" 2>>"$work/bench.err" || { cat "$work/bench.err" >&2; exit 1; }
    for bench in $benches; do
      for size in $(sizes_of $bench); do
        grep "^\"$bench/$size/real_time\"" "$work/run.csv" | cut -d, -f6 >>"$work/$mode.$bench.$size"
      done
    done
  done
done
spread() { sort -g | awk '{v[NR]=$1} END {m=(NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); printf "%.0f", (m > 0 ? 100 * (v[NR]-v[1]) / m : 0)}'; }
echo "uploads from pinned memory, transport=$transport ($UCX_TLS), medians of $repetitions runs"
echo "replay: copy-on-write snapshots (the default); copy: GPUPOOL_COPY_ON_WRITE=off; ratios against off"
printf "%-30s %12s %12s %12s %8s %8s  %s\n" "upload" "replay MB/s" "copy MB/s" "off MB/s" "replay" "copy" \
  "spread replay / copy / off"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f%%", (b > 0 ? 100 * a / b : 0)}'; }
mbs() { awk -v v="$1" 'BEGIN {printf "%.0f", v / 1e6}'; }
for bench in $benches; do
  label="cudaMemcpy"
  [ "$bench" = HostToDeviceAsync ] && label="cudaMemcpyAsync+sync"
  [ "$bench" = HostToDeviceFilled ] && label="fill+cudaMemcpy"
  for size in $(sizes_of $bench); do
    on=$(median <"$work/replay.$bench.$size")
    copy=$(median <"$work/copy.$bench.$size")
    off=$(median <"$work/off.$bench.$size")
    printf "%-30s %12s %12s %12s %8s %8s  ±%s%% / ±%s%% / ±%s%%\n" "$label $((size / 1024)) KiB" \
      "$(mbs "$on")" "$(mbs "$copy")" "$(mbs "$off")" "$(ratio "$on" "$off")" "$(ratio "$copy" "$off")" \
      "$(spread <"$work/replay.$bench.$size")" "$(spread <"$work/copy.$bench.$size")" \
      "$(spread <"$work/off.$bench.$size")"
  done
done
