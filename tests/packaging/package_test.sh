#!/usr/bin/env bash
# package_test.sh DEB_DIR CUDA_PROGRAM: gpupool's Debian packages, end to end, as root.
#
#   1. scripts/package builds the packages into DEB_DIR (or, with GPUPOOL_DEBS_BUILT=1,
#      the .debs scripts/package already left there are used); lintian reports no error.
#   2. dpkg -i installs them all; the systemd units pass `systemd-analyze verify`; the
#      packages ship no /etc/gpupool/gpupool.conf (its example is in /usr/share/doc), so
#      no daemon's unit may start until the admin writes the site config
#      (`systemd-analyze condition` fails, and passes once the file exists).
#   3. A site runs from the installed files only (netns_site.sh --installed): head,
#      two compute nodes and two GPU hosts, each a network namespace with its own address
#      and its own /etc, configured as docs/install.md says; a pooled job
#      (sbatch --gpu-pool=a100:1) runs CUDA_PROGRAM (tests/remote's iterate) through the
#      installed spank plugin and remoting libcuda.so.1 on a GPU host's GPU, which fails
#      mid-run: the program goes on on the other GPU host's GPU and the job completes.
#      Then the same site with high availability (docs/install.md section 9): etcd
#      (Debian's etcd-server) on three hosts with TLS and auth, gpupoold on two; a pooled
#      job's leader gpupoold is killed, the standby takes over, the job's GPU fails and is
#      still swapped, and the job completes.
#   4. The dev cluster runs from the installed files (scripts/devcluster with
#      GPUPOOL_DEV_PREFIX=/usr, one node): its gpupoold, agents and publisher are the
#      installed programs, its plugstack line the installed plugin, and a pooled job
#      (sbatch --gpu-pool=a100:1) runs CUDA_PROGRAM through the installed plugin and
#      library; then `down`.
#   5. dpkg --purge removes them, and no file they installed (dpkg -L) is left, nor
#      gpupoold's state directory.
# The site's namespaces and addresses are its own, so it runs beside any dev cluster; so
# does step 4's dev cluster (its own directory and ports: GPUPOOL_DEVDIR-pkg,
# GPUPOOL_DEV_PORTBASE + 50). It refuses to run where gpupool packages are already installed (it would remove them).
# Whatever happens, the site is stopped and the packages purged before it exits.
set -euo pipefail

deb_dir=${1:?usage: package_test.sh DEB_DIR CUDA_PROGRAM}
program=${2:?usage: package_test.sh DEB_DIR CUDA_PROGRAM}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PACKAGES=(gpupool-common gpupool-server gpupool-agent slurm-gpupool-plugins libgpupool-remote)
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }
step() { echo "package_test: $*"; }

[[ $(id -u) == 0 ]] || fail "must run as root (it installs packages with dpkg)"
[[ -x $program ]] || fail "no CUDA test program $program (built by tests/remote)"
for p in "${PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
    fail "$p is already on this machine; this test would remove it (dpkg --purge $p first)"
  fi
done
[[ ! -e /var/lib/gpupool ]] || fail "/var/lib/gpupool exists; purging gpupool-server would remove it"

policy_rc=""
installed=0
devcluster_up=0
export GPUPOOL_DEVDIR=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}-pkg
export GPUPOOL_DEV_PORTBASE=$((${GPUPOOL_DEV_PORTBASE:-16800} + 50))
devcluster=$REPO/scripts/devcluster

cleanup() {
  local rc=$?
  if ((devcluster_up)); then GPUPOOL_DEV_PREFIX=/usr "$devcluster" down >/dev/null 2>&1 || true; fi
  if ((installed)); then dpkg --purge "${PACKAGES[@]}" >/dev/null 2>&1 || true; fi
  [[ -n $policy_rc ]] && rm -f "$policy_rc"
  exit $rc
}
trap cleanup EXIT

# 1. Build. (The -dbgsym packages of the debug symbols are built too, and not installed.)
if [[ ${GPUPOOL_DEBS_BUILT:-0} == 1 ]]; then
  debs=()
  for deb in "$deb_dir"/*.deb; do [[ $deb == *-dbgsym_* ]] || debs+=("$deb"); done
  step "using the ${#debs[@]} packages scripts/package left in $deb_dir"
else
  step "building the packages (scripts/package --out $deb_dir)"
  start=$SECONDS
  mapfile -t debs < <("$REPO/scripts/package" --out "$deb_dir" | grep -v -- '-dbgsym_')
  step "built ${#debs[@]} packages in $((SECONDS - start)) s"
fi
((${#debs[@]} == ${#PACKAGES[@]})) || fail "expected ${#PACKAGES[@]} .debs, got: ${debs[*]}"
for p in "${PACKAGES[@]}"; do
  printf '%s\n' "${debs[@]}" | grep -q "/${p}_" || fail "no .deb of $p among: ${debs[*]}"
done
lintian_out=$(lintian --tag-display-limit 0 "${debs[@]}" 2>&1 || true)
if grep -q '^E:' <<<"$lintian_out"; then
  fail "lintian errors:"$'\n'"$(grep '^E:' <<<"$lintian_out")"
fi
step "lintian: no errors ($(grep -c '^W:' <<<"$lintian_out" || true) warnings)"
# The plugins were built for exactly the installed Slurm.
slurm_version=$(dpkg-query -W -f='${Version}' slurm-wlm-basic-plugins)
plugins_deb=$(printf '%s\n' "${debs[@]}" | grep '/slurm-gpupool-plugins_')
dpkg-deb -f "$plugins_deb" Depends | grep -qF "slurm-wlm-basic-plugins (= $slurm_version)" ||
  fail "slurm-gpupool-plugins does not depend on slurm-wlm-basic-plugins (= $slurm_version)"

# 2. Install. Where systemd runs, its postinst would start the daemons: policy-rc.d
# (honoured by deb-systemd-invoke) keeps them stopped; the dev cluster runs them.
if [[ -d /run/systemd/system && ! -e /usr/sbin/policy-rc.d ]]; then
  policy_rc=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' >"$policy_rc"
  chmod 755 "$policy_rc"
fi
installed=1
dpkg -i "${debs[@]}" >"$deb_dir/dpkg-install.log" 2>&1 ||
  fail "dpkg -i failed: $(tail -n 20 "$deb_dir/dpkg-install.log")"
files=()
for p in "${PACKAGES[@]}"; do
  while IFS= read -r f; do
    # Files and links to files; not directories, nor links to them (/lib on usrmerge).
    if [[ -f $f || (-L $f && ! -d $f) ]]; then files+=("$f"); fi
  done < <(dpkg -L "$p")
done
((${#files[@]} > 20)) || fail "dpkg -L lists only ${#files[@]} files"
step "installed ${#files[@]} files"
# dh_installsystemd's postinst enables the units (links that dpkg -L does not list).
[[ -L /etc/systemd/system/multi-user.target.wants/gpupoold.service ]] ||
  fail "gpupoold.service was not enabled at install"
units=(gpupoold gpupool-agentd gpupool-capacity-publisher)
unit_files=()
for unit in "${units[@]}"; do unit_files+=("/lib/systemd/system/$unit.service"); done
for f in /usr/sbin/gpupoold /usr/bin/gpupoolctl /usr/sbin/gpupool-agentd \
  /usr/sbin/gpupool-capacity-publisher /usr/share/doc/gpupool-common/examples/gpupool.conf \
  /etc/slurm/plugstack.conf.d/gpupool.conf "${unit_files[@]}"; do
  printf '%s\n' "${files[@]}" | grep -qxF "$f" || fail "no package installed $f"
done
# Safe defaults: no site config is shipped (the example, with its simulated GPUs and
# loopback addresses, is documentation), so no unit may start before the admin's.
[[ ! -e /etc/gpupool/gpupool.conf ]] || fail "a package installed /etc/gpupool/gpupool.conf"
[[ ! -e /etc/default/gpupool-capacity-publisher ]] ||
  fail "a package installed /etc/default/gpupool-capacity-publisher"
for unit in "${units[@]}"; do
  ! systemd-analyze condition --unit="$unit.service" >/dev/null 2>&1 ||
    fail "$unit.service would start with no site config"
done
# The admin's step (docs/install.md): the site config makes them startable.
printf 'agent = { server = "http://192.0.2.1:6830"; backend = "cuda"; };\n' >/etc/gpupool/gpupool.conf
printf 'GPUPOOL_SERVER=http://192.0.2.1:6830\n' >/etc/default/gpupool-capacity-publisher
for unit in "${units[@]}"; do
  systemd-analyze condition --unit="$unit.service" >/dev/null 2>&1 ||
    fail "$unit.service would not start with a site config: $(systemd-analyze condition --unit="$unit.service" 2>&1)"
done
rm -f /etc/gpupool/gpupool.conf /etc/default/gpupool-capacity-publisher
step "no unit starts before the site config exists; each may once it does"
plugin_dir=$(dirname "$(printf '%s\n' "${files[@]}" | grep '/spank_gpupool.so$')")
[[ -f $plugin_dir/select_cons_tres.so ]] || fail "spank_gpupool.so is not in Slurm's plugin directory ($plugin_dir)"
[[ -f $plugin_dir/gres_gpupool.so ]] || fail "gres_gpupool.so is not beside spank_gpupool.so"
remoting=$(printf '%s\n' "${files[@]}" | grep '/libcuda.so.1$')
[[ $remoting == /usr/lib/*/gpupool/libcuda.so.1 ]] || fail "libcuda.so.1 installed as $remoting"
# The plugstack line names the installed plugin, profiles and library.
line=$(grep '^required ' /etc/slurm/plugstack.conf.d/gpupool.conf)
for want in "$plugin_dir/spank_gpupool.so" "profile_dir=/etc/gpupool/profiles" "lib_dir=${remoting%/*}"; do
  grep -qF -- "$want" <<<"$line" || fail "plugstack.conf.d/gpupool.conf lacks $want: $line"
done
[[ -f /etc/gpupool/profiles/gpupool.profile ]] || fail "no installed gpupool.profile"
systemd-analyze verify "${unit_files[@]}" >"$deb_dir/verify.log" 2>&1 ||
  fail "systemd-analyze verify: $(cat "$deb_dir/verify.log")"
step "units pass systemd-analyze verify"

# 3. The site, from the installed files: each role on a host of its own (a network
# namespace), Slurm included, configured as docs/install.md says, and a pooled CUDA job
# whose GPU fails mid-run (tests/packaging/netns_site.sh --installed).
step "a site in network namespaces from the installed packages (netns_site.sh --installed)"
"$HERE/netns_site.sh" --installed "$program" >"$deb_dir/netns-site.log" 2>&1 ||
  fail "netns_site.sh --installed: $(tail -n 40 "$deb_dir/netns-site.log")"
sed -n 's/^netns_site: /package_test: site: /p' "$deb_dir/netns-site.log"

# 4. The dev cluster from the installed files (GPUPOOL_DEV_PREFIX=/usr), and a pooled job.
step "dev cluster from /usr in $GPUPOOL_DEVDIR (ports from $GPUPOOL_DEV_PORTBASE)"
start=$SECONDS
rm -rf "$GPUPOOL_DEVDIR"  # its own directory, made afresh (as on a fresh machine)
devcluster_up=1
GPUPOOL_DEV_PREFIX=/usr GPUPOOL_DEV_NODES=1 "$devcluster" up >"$deb_dir/devcluster-up.log" 2>&1 ||
  fail "devcluster up: $(tail -n 20 "$deb_dir/devcluster-up.log")"
for part in gpupoold agent-gpuhost1 publisher; do
  pid=$(cat "$GPUPOOL_DEVDIR/pids/$part.pid")
  exe=$(readlink "/proc/$pid/exe")
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
  case $part in
    publisher) [[ $cmd == *" /usr/sbin/gpupool-capacity-publisher "* ]] ||
      fail "the dev cluster's publisher runs '$cmd', not the installed one" ;;
    *) [[ $exe == /usr/sbin/* ]] || fail "the dev cluster's $part runs $exe, not an installed program" ;;
  esac
done
grep -q "^required $plugin_dir/spank_gpupool.so " "$GPUPOOL_DEVDIR/plugstack.conf" ||
  fail "the dev cluster's plugstack.conf does not load the installed plugin: $(cat "$GPUPOOL_DEVDIR/plugstack.conf")"
(
  # shellcheck disable=SC1091  # written by `devcluster up`
  . "$GPUPOOL_DEVDIR/env"
  out=$GPUPOOL_DEVDIR/pkgjob
  mkdir -p "$out"
  # As in tests/remote: the job gets its GPUs and library only from the plugin.
  id=$(env -u LD_LIBRARY_PATH -u CUDA_VISIBLE_DEVICES UCX_TLS=tcp UCX_NET_DEVICES=lo \
    sbatch --parsable --gpu-pool=a100:1 -o "$out/%j.out" "$REPO/tests/remote/slurm_job.sh" \
    "$program" 20 5 1 1 2>&1 | cut -d';' -f1)
  [[ $id =~ ^[0-9]+$ ]] || fail "sbatch on the dev cluster gave no job id: $id"
  for _ in $(seq 600); do
    state=$(scontrol show job "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    [[ $state == PENDING || $state == RUNNING || $state == CONFIGURING || $state == COMPLETING ]] || break
    sleep 0.2
  done
  job_out=$(cat "$out/$id.out" 2>/dev/null || true)
  [[ $state == COMPLETED ]] || fail "dev cluster job $id ended $state: $job_out"
  grep -q "^JOB lease=L.* ld_library_path=${remoting%/*}\$" <<<"$job_out" ||
    fail "dev cluster job $id did not get the installed remoting library: $job_out"
  grep -q '^iterate: PASS' <<<"$job_out" || fail "dev cluster job $id printed no PASS: $job_out"
  step "dev cluster job $id ran $(basename "$program") through the installed plugin and library: PASS"
)
GPUPOOL_DEV_PREFIX=/usr "$devcluster" down >"$deb_dir/devcluster-down.log" 2>&1 ||
  fail "devcluster down: $(tail -n 20 "$deb_dir/devcluster-down.log")"
devcluster_up=0
rm -rf "$GPUPOOL_DEVDIR"
step "dev cluster from the installed files: up, a pooled job, down in $((SECONDS - start)) s"

# 5. Purge: nothing they installed is left. gpupoold's state directory (made by systemd,
# not shipped) stands in as it would after the service ran.
mkdir -p /var/lib/gpupool && touch /var/lib/gpupool/gpupoold.db
dpkg --purge "${PACKAGES[@]}" >"$deb_dir/dpkg-purge.log" 2>&1 ||
  fail "dpkg --purge failed: $(tail -n 20 "$deb_dir/dpkg-purge.log")"
installed=0
left=()
for f in "${files[@]}" /var/lib/gpupool /etc/gpupool /etc/slurm/plugstack.conf.d/gpupool.conf; do
  if [[ -e $f || -L $f ]]; then left+=("$f"); fi
done
# The units' enable links (made by deb-systemd-helper at install, not listed by dpkg -L).
mapfile -t -O ${#left[@]} left < <(find /etc/systemd/system -name 'gpupool*' 2>/dev/null)
((${#left[@]} == 0)) || fail "left after purge: ${left[*]}"
step "purged; none of the ${#files[@]} files is left"
