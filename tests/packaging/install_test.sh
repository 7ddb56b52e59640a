#!/usr/bin/env bash
# install_test.sh BUILD: `cmake --install BUILD` into a staging directory (DESTDIR) puts
# every file where the installed files say it is: the units' ExecStart programs and
# config, the plugstack line's plugin, profile_dir and lib_dir, a man page for every page
# of man/; the remoting libcuda.so.1 sits alone in a private directory, never in a
# directory the dynamic linker searches; and the units pass `systemd-analyze verify`
# against the staged tree. No root needed. Exit 0 when all holds, 1 naming what does not.
set -euo pipefail

build=${1:?usage: install_test.sh BUILD}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

stage=$(mktemp -d /tmp/gpupool-install.XXXXXX)
trap 'rm -rf "$stage"' EXIT
DESTDIR=$stage cmake --install "$build" >"$stage.log" 2>&1 ||
  { cat "$stage.log" >&2; rm -f "$stage.log"; fail "cmake --install failed"; }
rm -f "$stage.log"

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
unit_dir=$(cache GPUPOOL_SYSTEMD_UNIT_DIR)
plugin_dir=$(cache GPUPOOL_SLURM_PLUGIN_DIR)
[[ -n $unit_dir && -n $plugin_dir ]] || fail "GPUPOOL_SYSTEMD_UNIT_DIR/GPUPOOL_SLURM_PLUGIN_DIR not in the cache"

# Units: each names an installed program and config file.
for unit in gpupoold gpupool-agentd; do
  file=$stage$unit_dir/$unit.service
  [[ -f $file ]] || fail "$unit.service not installed in $unit_dir"
  ! grep -q '@[A-Z_]*@' "$file" || fail "$unit.service keeps a template variable: $(grep '@' "$file")"
  exec_start=$(sed -n 's/^ExecStart=//p' "$file")
  program=${exec_start%% *}
  [[ -x $stage$program ]] || fail "$unit.service starts $program, which is not installed"
  config=$(grep -o -- '-f [^ ]*' <<<"$exec_start" | cut -d' ' -f2)
  [[ -f $stage$config ]] || fail "$unit.service reads $config, which is not installed"
done

# The plugstack line: plugin, profiles and remoting library as installed.
snippet=$(find "$stage" -path '*/plugstack.conf.d/gpupool.conf')
[[ -n $snippet ]] || fail "no plugstack.conf.d/gpupool.conf installed"
line=$(grep '^required ' "$snippet")
plugin=$(cut -d' ' -f2 <<<"$line")
[[ $plugin == "$plugin_dir/spank_gpupool.so" && -f $stage$plugin ]] ||
  fail "the plugstack line loads $plugin, not the installed $plugin_dir/spank_gpupool.so"
[[ -f $stage$plugin_dir/gres_gpupool.so ]] || fail "gres_gpupool.so not in $plugin_dir"
profile_dir=$(tr ' ' '\n' <<<"$line" | sed -n 's/^profile_dir=//p')
lib_dir=$(tr ' ' '\n' <<<"$line" | sed -n 's/^lib_dir=//p')
for p in "$REPO"/etc/profiles/*.profile; do
  [[ -f $stage$profile_dir/${p##*/} ]] || fail "profile ${p##*/} not in profile_dir=$profile_dir"
done
[[ -f $stage$lib_dir/libcuda.so.1 && -f $stage$lib_dir/libgpupool-ucx-client.so ]] ||
  fail "lib_dir=$lib_dir lacks libcuda.so.1 or its UCX module"
# Alone: only the library, its module, the NVML library and the NVRTC shim there (by
# their sonames, libnvidia-ml.so.1 and libnvrtc.so.N, and no .so link that a linker could
# pick up), and no libcuda.so* or libnvidia-ml.so* anywhere else.
[[ $(ls "$stage$lib_dir" | tr '\n' ' ') =~ ^"libcuda.so.1 libgpupool-ucx-client.so libnvidia-ml.so.1 "(libnvrtc\.so\.[0-9]+ )?$ ]] ||
  fail "lib_dir holds more than the remoting library: $(ls "$stage$lib_dir")"
[[ $(find "$stage" -name 'libcuda.so*' | wc -l) == 1 ]] ||
  fail "libcuda.so* installed more than once: $(find "$stage" -name 'libcuda.so*')"
[[ $(find "$stage" -name 'libnvidia-ml.so*' | wc -l) == 1 ]] ||
  fail "libnvidia-ml.so* installed more than once: $(find "$stage" -name 'libnvidia-ml.so*')"
case ${lib_dir##*/} in lib | lib64 | *-linux-gnu) fail "lib_dir=$lib_dir is a system library directory" ;; esac

# Every man page.
for page in "$REPO"/man/*.[1-8]; do
  name=${page##*/}
  [[ -n $(find "$stage" -path "*/man${name##*.}/$name") ]] || fail "man page $name not installed"
done

# systemd's own check, with the staged tree as root, so that the programs it requires to
# exist are the staged ones. From the machine: the targets and munge.service the units
# order against, and /bin/kill (ExecReload). Documentation= pages are checked above.
mkdir -p "$stage/lib/systemd/system" "$stage/bin"
cp -a /lib/systemd/system/*.target /lib/systemd/system/munge.service "$stage/lib/systemd/system/"
cp /bin/kill "$stage/bin/"
if ! systemd-analyze verify --man=no --root="$stage" "$unit_dir/gpupoold.service" \
  "$unit_dir/gpupool-agentd.service" >"$stage/verify.log" 2>&1; then
  fail "systemd-analyze verify: $(cat "$stage/verify.log")"
fi
# Sandboxing (issue 37): systemd's exposure level, 0 (locked down) to 10 (none), which
# --threshold takes times ten; before it gpupoold was at 8.9 and gpupool-agentd at 9.1
# (gpupool-agentd 5.5 before ProtectSystem=strict and its system-call filter, 3.9 after).
for limit in gpupoold:20 gpupool-agentd:40; do
  unit=${limit%%:*}
  systemd-analyze security --offline=yes --root="$stage" --threshold="${limit#*:}" "$unit_dir/$unit.service" \
    >"$stage/security.log" 2>&1 ||
    fail "$unit.service is exposed more than ${limit#*:}/10: $(grep Overall "$stage/security.log")"
done
echo "install_test: units verified; every path the installed files name is installed"
