#!/usr/bin/env bash
# netns_site.sh BIN_DIR [REMOTING_DIR CUDA_PROGRAM]
# netns_site.sh --installed CUDA_PROGRAM
#
# The multi-host install test (issue 39): gpupool's roles on hosts of their own, each a
# network namespace with its own address, joined by a switch (a bridge in a namespace of
# its own), as docs/install.md lays a site out:
#
#   head  10.211.0.1   gpupoold (listen = "10.211.0.1:6830", from its gpupool.conf)
#                      [--installed: slurmctld, gpupool-capacity-publisher, job_submit.lua;
#                      with HA, an etcd member too]
#   head2 10.211.0.2   [--installed only, HA] the second gpupoold and an etcd member
#   quorum 10.211.0.3  [--installed only, HA] the third etcd member
#   cn1   10.211.0.11  a compute node (and submit host) [--installed: slurmd, the plugin]
#   cn2   10.211.0.12  [--installed only] a second compute node
#   gpu1  10.211.0.21  gpupool-agentd, rack1 (listen = "10.211.0.21:7100")
#   gpu2  10.211.0.22  gpupool-agentd, rack2 (listen = "10.211.0.22:7100")
#
# Both forms check what only separate hosts show: the agents register over the switch with
# their own addresses as the GPUs' endpoints; a compute node reaches gpupoold at the head's
# address and sees both racks; nothing listens on loopback (in its namespace a loopback
# listener is out of every other host's reach, so a default left at 127.0.0.1 fails here).
#
# BIN_DIR (a build tree's programs, no Slurm): a GPU host cut off from the switch goes
# UNREACHABLE and comes back by itself, as the runbook's "a host is unreachable" says. With
# REMOTING_DIR (gpupool's libcuda.so.1) and CUDA_PROGRAM (tests/remote/programs/iterate,
# built with nvcc): the program runs on cn1 against a GPU of one GPU host over the switch
# (UCX over TCP on eth0), that GPU is failed mid-run, and the program goes on on a GPU of
# the other host and prints PASS. (No Slurm in this form: the test acquires the lease as
# root and rewrites the lease file when the lease moves, as spank_gpupool's watcher does.)
#
# --installed (gpupool's Debian packages installed on this machine: package_test.sh runs it
# while they are): every role runs the installed programs, configured only through the
# files docs/install.md tells an admin to write, each host's own: /etc/hosts,
# /etc/gpupool/gpupool.conf, /etc/default/gpupool-*, /etc/slurm/{slurm.conf, gres.conf,
# plugstack.conf, plugstack.conf.d/gpupool.conf, job_submit.lua} are written under
# /etc/netns/NAMESPACE/, which `ip netns exec` mounts over /etc for that host only (the
# machine's own /etc is not touched). gpupool's daemons run their installed systemd unit's
# ExecStart (its EnvironmentFile read, its User= taken unless DynamicUser), Slurm's run as
# SlurmUser=slurm, and each host has its own host name (a UTS namespace). A pooled CUDA job
# (sbatch --gpu-pool=a100:1 CUDA_PROGRAM, submitted on cn1) runs on a GPU of one GPU host;
# that GPU is failed mid-run (gpupoolctl update gpu=... state=fail); the job goes on on the
# other host's GPU, prints PASS and COMPLETES; no node is drained.
# Then the same site goes highly available as docs/install.md section 9 says (no job
# running; the install and Slurm are kept): a CA and certificates made with openssl, etcd
# (Debian's etcd-server, its unit's ExecStart as User=etcd, /etc/etcd and
# /etc/default/etcd per member) on head, head2 and quorum with TLS for clients and peers,
# client certificates required and auth on (gpupoold's user limited to /gpupool/: refused
# elsewhere, and nobody served without a user); gpupoold on head and head2 with
# state = "etcd", its key, password and token key handed over by the admin's
# LoadCredential= drop-in; every client (gpupoolctl, the agents, the plugstack line, the
# publisher) told both replicas. A pooled job (told of both, with slurmd not restarted)
# runs; the leader gpupoold is killed (-9, by pid), the standby leads, the job's GPU is
# failed, the program goes on on the other GPU host and the job COMPLETES; no node is
# drained; the killed replica, started again as systemd's Restart= would, follows.
# What it does not follow from the runbook (one machine): one munged serves every host (its
# socket is a file every namespace reaches; slurm.conf's AuthInfo=socket= and gpupool.conf's
# munge_socket name it), state, spool and log directories are under the test's directory
# (StateDirectory= of the publisher's unit too, etcd's data directories), gpupoold runs as
# root (its unit's DynamicUser needs systemd), and slurmdbd is not run.
#
# Runs as root (ip netns). Nothing outside the namespaces it creates is touched but
# /etc/netns/ (its own entries, removed at exit) and, with --installed where it is missing,
# an empty /etc/etcd (the mount point of the members' /etc/etcd, removed at exit): the switch is a namespace too, and every
# address is in one of them. Exit 0 when all holds, 1 naming what does not.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
fail() { echo "netns_site: FAIL: $*" >&2; exit 1; }
step() { echo "netns_site: $*"; }

usage="usage: netns_site.sh BIN_DIR [REMOTING_DIR CUDA_PROGRAM] | --installed CUDA_PROGRAM"
installed=0 remoting="" program=""
if [[ ${1:-} == --installed ]]; then
  installed=1
  # Every role reads its host's own files, never a caller's (a dev cluster's environment).
  unset SLURM_CONF GPUPOOL_CONF GPUPOOL_SERVER
  program=${2:?$usage}
  [[ -x $program ]] || fail "no CUDA program '$program'"
  gpupoold_bin=/usr/sbin/gpupoold agentd_bin=/usr/sbin/gpupool-agentd ctl_bin=/usr/bin/gpupoolctl
  for b in slurmctld slurmd sbatch scontrol sinfo; do command -v "$b" >/dev/null || fail "needs Slurm's $b"; done
  # The HA part: etcd from Debian's etcd-server (its unit too) and etcd-client, and openssl.
  for b in etcd etcdctl openssl; do command -v "$b" >/dev/null || fail "needs $b (scripts/install-deps installs it)"; done
  [[ -f /lib/systemd/system/etcd.service ]] || fail "no /lib/systemd/system/etcd.service (Debian's etcd-server)"
  id etcd >/dev/null 2>&1 || fail "no user etcd (made by Debian's etcd-server)"
  id slurm >/dev/null 2>&1 || fail "no user slurm (Debian's SlurmUser, made by the slurm-wlm packages)"
else
  bin=${1:?$usage}
  remoting=${2:-} program=${3:-}
  if [[ -n $remoting ]]; then
    [[ -f $remoting/libcuda.so.1 ]] || fail "no $remoting/libcuda.so.1"
    [[ -x $program ]] || fail "no CUDA program '$program'"
  fi
  gpupoold_bin=$bin/gpupoold agentd_bin=$bin/gpupool-agentd ctl_bin=$bin/gpupoolctl
fi
[[ $(id -u) == 0 ]] || fail "must run as root (it creates network namespaces)"
for b in "$gpupoold_bin" "$ctl_bin" "$agentd_bin"; do [[ -x $b ]] || fail "no $b"; done
command -v ip >/dev/null || fail "needs ip (iproute2)"

# Names unique to this run: several may run at once on one machine.
tag=gs$$
net=10.211.0
declare -A ADDR=([head]=$net.1 [cn1]=$net.11 [gpu1]=$net.21 [gpu2]=$net.22)
((installed)) && ADDR+=([cn2]=$net.12 [head2]=$net.2 [quorum]=$net.3)
site_start=$SECONDS
work=$(mktemp -d "/tmp/gpupool-netns.XXXXXX")
# SlurmUser (slurm) reaches its state and log directories, and the munge socket, in here.
chmod 755 "$work"
pids=()
made_etc_netns=0 made_etc_etcd=0
[[ -d /etc/netns ]] || made_etc_netns=1

ns() { echo "$tag-$1"; }
in_ns() { local host=$1; shift; ip netns exec "$(ns "$host")" "$@"; }

cleanup() {
  local rc=$? pid host
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # What those left in our namespaces (slurmstepd and a job of a failed run): only
  # processes in the namespaces this run made.
  for host in "${!ADDR[@]}"; do
    for pid in $(ip netns pids "$(ns "$host")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  "$REPO/tests/lib/private-munged" stop "$work/munge" >/dev/null 2>&1 || true
  for host in "${!ADDR[@]}" switch; do
    ip netns del "$(ns "$host")" 2>/dev/null || true
    rm -rf "/etc/netns/$(ns "$host")"
  done
  ((made_etc_netns)) && rmdir /etc/netns 2>/dev/null || true
  ((made_etc_etcd)) && rmdir /etc/etcd 2>/dev/null || true
  if ((rc != 0)); then
    for f in "$work"/*.log "$work"/*.out; do [[ -f $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT

# The switch, and one cable (veth pair) per host.
ip netns add "$(ns switch)"
in_ns switch ip link add br0 type bridge
in_ns switch ip link set br0 up
for host in "${!ADDR[@]}"; do
  ip netns add "$(ns "$host")"
  in_ns "$host" ip link set lo up
  # Created inside the host's namespace, its far end moved into the switch's.
  in_ns "$host" ip link add eth0 type veth peer name "p-$host"
  in_ns "$host" ip link set "p-$host" netns "$(ns switch)"
  in_ns switch ip link set "p-$host" master br0 up
  in_ns "$host" ip addr add "${ADDR[$host]}/24" dev eth0
  in_ns "$host" ip link set eth0 up
done
# UCX opens its TCP interface only on links that are up (operstate "up", a moment after
# `ip link set up`): an agent started earlier serves no TCP but loopback's, and every client
# from another host is refused at the handshake ("Destination is unreachable").
link_up() { [[ $(in_ns "$1" cat /sys/class/net/eth0/operstate) == up ]]; }
for host in "${!ADDR[@]}"; do
  for _ in $(seq 100); do link_up "$host" && break; sleep 0.1; done
  link_up "$host" || fail "$host's eth0 is not up: $(in_ns "$host" ip -br link show eth0)"
done
hosts=$(for h in head head2 quorum cn1 cn2 gpu1 gpu2; do [[ -z ${ADDR[$h]:-} ]] || printf '%s %s, ' "$h" "${ADDR[$h]}"; done)
step "${#ADDR[@]} hosts on a switch: ${hosts%, }"

# MUNGE: one key for the site. The socket is a file, which every namespace reaches (as
# every real host reaches its own munged with the same key).
MUNGE_SOCKET=$("$REPO/tests/lib/private-munged" start "$work/munge") || fail "munged did not start"
export MUNGE_SOCKET

head_url=http://${ADDR[head]}:6830
mkdir -p "$work/head/state" "$work/gpu1" "$work/gpu2" "$work/cn1"
if ((installed)); then
  # Each host's own /etc entries, as its admin writes them (docs/install.md).
  etc() { echo "/etc/netns/$(ns "$1")"; }
  for host in "${!ADDR[@]}"; do
    mkdir -p "$(etc "$host")"
    {
      echo "127.0.0.1 localhost"
      echo "${ADDR[head]} head"
      echo "${ADDR[head2]} head2"
      echo "${ADDR[quorum]} quorum"
      echo "${ADDR[cn1]} cn1"
      echo "${ADDR[cn2]} cn2"
      echo "${ADDR[gpu1]} gpuhost1"
      echo "${ADDR[gpu2]} gpuhost2"
    } >"$(etc "$host")/hosts"
    # /etc/gpupool replaced for this host: the installed profiles come along.
    mkdir -p "$(etc "$host")/gpupool"
    cp -a /etc/gpupool/profiles "$(etc "$host")/gpupool/"
  done
  conf() { echo "$(etc "$1")/gpupool/gpupool.conf"; }
else
  conf() { echo "$work/$1/gpupool.conf"; }
fi

# gpupool.conf per role, as docs/install.md section 5 writes them. With --installed, the
# site's one munged named (see above).
munge_line="munge_socket = \"$MUNGE_SOCKET\";"
{
  ((installed)) && echo "$munge_line"
  cat <<EOF
gpupoold = {
  listen = "${ADDR[head]}:6830";
  state_dir = "$work/head/state";
EOF
  if ((!installed)); then
    cat <<EOF
  slurm_reap = false;
  # Not Slurm here (the test acquires leases as root for made-up jobs): a site keeps the
  # default, true, and its jobs hold gpupool licences (docs/install.md).
  enforce_licenses = false;
EOF
  fi
  cat <<EOF
};
pools = (
  { name = "a100"; models = [ "*A100*" ]; }
);
client = { server = "$head_url"; };
EOF
} >"$(conf head)"
for gpu in gpu1 gpu2; do
  rack=rack${gpu#gpu}
  {
    ((installed)) && echo "$munge_line"
    cat <<EOF
agent = {
  server = "$head_url";
  host = "gpuhost${gpu#gpu}";
  rack = "$rack";
  listen = "${ADDR[$gpu]}:7100";
  backend = "sim";
  heartbeat_interval = 1;
  sim = { gpus = ( { model = "A100-SXM4-80GB"; memory = "80G"; count = 2; } ); };
};
EOF
  } >"$(conf "$gpu")"
done
# Where an admin runs gpupoolctl: a client section.
echo "client = { server = \"$head_url\"; };" >"$(conf cn1)"
if ((installed)); then echo "$munge_line" >>"$(conf cn1)"; fi

# --installed: Slurm's files as docs/install.md section 6 writes them, before anything starts
# (gpupoold reads slurm.conf too).
if ((installed)); then
  plugstack_fragment=/etc/slurm/plugstack.conf.d/gpupool.conf
  [[ -f $plugstack_fragment ]] || fail "no installed $plugstack_fragment"
  job_submit=/usr/share/gpupool/examples/job_submit.lua
  [[ -f $job_submit ]] || fail "no installed $job_submit"
  mkdir -p "$work/head/slurmctld" "$work/head/publisher" "$work/cn1" "$work/cn2"
  # Section 6: the licences file exists, empty, before anything reads slurm.conf (gpupoold
  # does, through libslurm, and gives up after 60 s on a missing Include).
  touch "$work/head/publisher/licenses.conf"
  chown -R slurm:slurm "$work/head/slurmctld" "$work/head/publisher"
  touch "$work/slurmctld.log" && chown slurm:slurm "$work/slurmctld.log"
  # The same slurm.conf on every host: the site's own lines, then section 6's.
  cat >"$work/slurm.conf" <<EOF
ClusterName=netns
SlurmctldHost=head
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$work/head/slurmctld
SlurmdSpoolDir=$work/%n/slurmd
SlurmctldPidFile=$work/head/slurmctld.pid
SlurmdPidFile=$work/%n/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# Slurm's default: slurmd's wait for the prolog RPC is twice this (scripts/devcluster.d).
MessageTimeout=10
KillWait=2
# gpupool (docs/install.md, section 6)
GresTypes=gpupool
NodeName=cn[1-2] CPUs=4 RealMemory=1000 Gres=gpupool:2 State=UNKNOWN
Include gpupool-licenses.conf
SchedulerParameters=allow_zero_lic,bf_licenses,sched_interval=1,sched_min_interval=100000,bf_interval=1,batch_sched_delay=0
JobSubmitPlugins=lua
PlugStackConfig=/etc/slurm/plugstack.conf
PrologFlags=contain
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  for host in head head2 cn1 cn2; do
    d=$(etc "$host")/slurm
    mkdir -p "$d/plugstack.conf.d"
    cp "$work/slurm.conf" "$d/slurm.conf"
    echo "include /etc/slurm/plugstack.conf.d/*.conf" >"$d/plugstack.conf"
    # The installed fragment with server= set to gpupoold, and the site's munged.
    grep '^required ' "$plugstack_fragment" |
      sed -e "s|server=[^ ]*|server=$head_url|" -e "s|\$| munge_socket=$MUNGE_SOCKET|" >"$d/plugstack.conf.d/gpupool.conf"
    grep -q "^required .*spank_gpupool.so server=$head_url " "$d/plugstack.conf.d/gpupool.conf" ||
      fail "the installed plugstack line has no server= to set: $(grep -v '^#' "$plugstack_fragment")"
    # The publisher's licences, which slurm.conf includes on every host (one filesystem
    # here, as a shared /var/lib/gpupool-publisher would be).
    ln -s "$work/head/publisher/licenses.conf" "$d/gpupool-licenses.conf"
  done
  for host in cn1 cn2; do
    echo "NodeName=cn[1-2] Name=gpupool Count=2" >"$(etc "$host")/slurm/gres.conf"
  done
  cp "$job_submit" "$(etc head)/slurm/job_submit.lua"
  ln -s "$work/head/publisher/gpupool_pools" "$(etc head)/slurm/gpupool_pools"
  mkdir -p "$(etc head)/default"
  cat >"$(etc head)/default/gpupool-capacity-publisher" <<EOF
GPUPOOL_SERVER=$head_url
GPUPOOL_PUBLISHER_OPTS="--interval 1 --munge-socket $MUNGE_SOCKET"
EOF
fi

# A daemon on HOST as its installed systemd unit starts it: ExecStart with the unit's
# Environment= (specifiers %H, the host name, and %p, the unit's name) and EnvironmentFile
# read (systemd splits an unbraced $VAR into words, as sh does unquoted), as its User= (not
# with DynamicUser=, which needs systemd), with each SUBST ("FROM=TO") applied to the
# command line. HOSTNAME is the host's own (a UTS namespace of its own). The LoadCredential=
# lines of the host's drop-ins (/etc/systemd/system/UNIT.service.d/*.conf, as `systemctl
# edit` writes them) are done as systemd does them: each file copied, readable by the
# service's user only, into /run/credentials/UNIT.service (a /run of the daemon's own).
# Its pid (`ip netns exec`'s, which execs the daemon) is unit_pid[UNIT@HOST].
declare -A unit_pid=()
start_unit() {
  local host=$1 unit=$2 hostname=$3 file=/lib/systemd/system/$2.service cmd user envfile sub as_user=""
  local setup="" line dropin creds=/run/credentials/$2.service
  shift 3
  [[ -f $file ]] || fail "no installed $file"
  cmd=$(sed -n 's/^ExecStart=//p' "$file")
  for sub in "$@"; do cmd=${cmd//"${sub%%=*}"/"${sub#*=}"}; done
  user=$(sed -n 's/^User=//p' "$file")
  grep -qx 'DynamicUser=yes' "$file" && user=""
  [[ -n $user && $user != root ]] && as_user="setpriv --reuid=$user --regid=$user --init-groups"
  while IFS= read -r line; do
    line=${line//%H/$hostname} line=${line//%p/$unit}
    setup+="export ${line%%=*}='${line#*=}' && "
  done < <(sed -n 's/^Environment=//p' "$file")
  envfile=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$file")
  envfile=${envfile//%p/$unit}
  for dropin in "$(etc "$host")/systemd/system/$unit.service.d"/*.conf; do
    [[ -f $dropin ]] || continue
    [[ $setup == *"$creds"* ]] || setup+="mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -m 0700 -p $creds && "
    while IFS= read -r line; do
      setup+="install -m 0400 ${user:+-o $user }'${line#*:}' $creds/${line%%:*} && "
    done < <(sed -n 's/^LoadCredential=//p' "$dropin")
  done
  [[ -z $user || $setup != *"$creds"* ]] || setup+="chown $user $creds && "
  ip netns exec "$(ns "$host")" unshare --uts sh -c \
    "hostname $hostname && $setup set -a && { [ -z '$envfile' ] || [ ! -f '$envfile' ] || . '$envfile'; } && set +a && exec $as_user $cmd" \
    >"$work/$unit-$host.log" 2>&1 &
  pids+=($!)
  unit_pid[$unit@$host]=$!
}
# stop_unit UNIT@HOST: as `systemctl stop` (SIGTERM, and the daemon waited for).
stop_unit() {
  kill "${unit_pid[$1]}" 2>/dev/null || true
  wait "${unit_pid[$1]}" 2>/dev/null || true
}

# `ip netns exec` itself, not in_ns: a function run in the background is a subshell, whose
# pid ($!) is not the daemon's, and killing it at cleanup would leave the daemon running.
if ((installed)); then
  start_unit head gpupoold head
else
  ip netns exec "$(ns head)" "$gpupoold_bin" -D -f "$(conf head)" >"$work/gpupoold.log" 2>&1 &
  pids+=($!)
fi
ctl() {
  if ((installed)); then
    in_ns "$1" "$ctl_bin" "${@:2}"
  else
    in_ns "$1" env GPUPOOL_CONF="$(conf "$1")" "$ctl_bin" "${@:2}"
  fi
}
for _ in $(seq 100); do ctl cn1 ping >/dev/null 2>&1 && break; sleep 0.1; done
ctl cn1 ping >/dev/null || fail "cn1 cannot reach gpupoold at $head_url"
step "$(ctl cn1 ping)"

for gpu in gpu1 gpu2; do
  if ((installed)); then
    start_unit "$gpu" gpupool-agentd "gpuhost${gpu#gpu}"
  else
    ip netns exec "$(ns "$gpu")" "$agentd_bin" -D -f "$(conf "$gpu")" >"$work/agent-$gpu.log" 2>&1 &
    pids+=($!)
  fi
done
registered() { [[ $(ctl cn1 show gpus --json | jq '[.gpus[] | select(.state == "IDLE")] | length') == 4 ]]; }
for _ in $(seq 150); do registered && break; sleep 0.2; done
registered || fail "not every GPU registered IDLE: $(ctl cn1 show gpus -o)"

# Each GPU's endpoint is its host's namespace address, and the racks are the hosts'.
gpus=$(ctl cn1 show gpus --json)
for gpu in gpu1 gpu2; do
  n=$(jq --arg h "gpuhost${gpu#gpu}" --arg e "${ADDR[$gpu]}:7100" --arg r "rack${gpu#gpu}" \
    '[.gpus[] | select(.host == $h and .endpoint == $e and .rack == $r)] | length' <<<"$gpus")
  [[ $n == 2 ]] || fail "$gpu's GPUs are not registered at ${ADDR[$gpu]}:7100 in rack${gpu#gpu}: $gpus"
done
[[ $(ctl cn1 show pools a100 --json | jq -r '.pools[0].usable') == 4 ]] ||
  fail "pool a100 is not 4 usable GPUs: $(ctl cn1 show pools a100 -o)"
step "both GPU hosts registered over the switch; a compute node sees 4 GPUs in 2 racks"

# gpupoold's and the agents' listeners are on their host's own address, not on loopback.
# (UCX's own TCP interfaces are opened on every device, lo included, at ports the OS
# picks: `ss -ltnp` on a GPU host shows them; they are not gpupool's configured listeners.)
for host in head gpu1 gpu2; do
  port=7100
  [[ $host == head ]] && port=6830
  listeners=$(in_ns "$host" ss -Hltn | awk '{print $4}')
  grep -qx "${ADDR[$host]}:$port" <<<"$listeners" || fail "$host does not listen on ${ADDR[$host]}:$port: $listeners"
  ! grep -E "^(127\.[0-9.]+|\[::1\]|\*|0\.0\.0\.0|\[::\]):$port\$" <<<"$listeners" ||
    fail "$host listens on port $port beyond ${ADDR[$host]}: $listeners"
done
# And loopback is no way in: the compute node's own 127.0.0.1 has no gpupoold.
! in_ns cn1 env GPUPOOL_CONF=/dev/null "$ctl_bin" --server http://127.0.0.1:6830 ping >/dev/null 2>&1 ||
  fail "cn1 reached a gpupoold on its own loopback"
step "gpupoold and the agents listen on their hosts' addresses only"

# A CUDA process on a compute node, its GPU on another host, survives that GPU.
if [[ -n $remoting ]]; then
  cred=$(munge -S "$MUNGE_SOCKET" -s gpupool)
  answer=$(in_ns cn1 curl -sf -H "Authorization: MUNGE $cred" -d \
    '{"job_id":1,"request":[{"pool":"a100","count":1}],"movable":true}' \
    "$head_url/v1/leases") || fail "cannot acquire a lease from cn1"
  lease=$(jq -r '.lease.id' <<<"$answer")
  old=$(jq -r '.lease.gpus[0].uuid + "@" + .lease.gpus[0].endpoint' <<<"$answer")
  leased=$(jq -r '.lease.gpus[0].id' <<<"$answer")
  # The other GPU of the leased one's host drained, so that every spare is on the other
  # GPU host: the process must move to another host.
  sibling=${leased%:*}:$((1 - ${leased##*:}))
  case ${leased%:*} in gpuhost1) to=gpu2 ;; gpuhost2) to=gpu1 ;; *) fail "lease on $leased: $answer" ;; esac
  ctl head update gpu="$sibling" state=drain reason="netns_site: spare on the other host" >/dev/null
  jq '.lease' <<<"$answer" >"$work/cn1/lease.json"
  ip netns exec "$(ns cn1)" env LD_LIBRARY_PATH="$remoting" UCX_TLS=tcp UCX_NET_DEVICES=eth0 \
    GPUPOOL_GPUS="$old" GPUPOOL_LEASE_ID="$lease" GPUPOOL_LEASE_TOKEN="$(jq -r '.lease.token' <<<"$answer")" \
    GPUPOOL_LEASE_FILE="$work/cn1/lease.json" GPUPOOL_RECOVERY_DEADLINE=60 \
    "$program" 200 20 4 16 >"$work/program.log" 2>&1 &
  program_pid=$!
  pids+=("$program_pid")
  for _ in $(seq 300); do grep -q '^iterate: running' "$work/program.log" && break; sleep 0.2; done
  grep -q '^iterate: running' "$work/program.log" || fail "the program did not start: $(cat "$work/program.log")"
  ctl head update gpu="$leased" state=fail reason="netns_site: failed mid-run" >/dev/null
  # What spank_gpupool's lease watcher does on the node: the moved lease, into the file.
  for _ in $(seq 100); do
    moved=$(ctl head show leases lease="$lease" --json | jq '.leases[0]')
    [[ $(jq -r '.generation' <<<"$moved") == 2 ]] && break
    sleep 0.1
  done
  [[ $(jq -r '.generation' <<<"$moved") == 2 ]] || fail "the lease did not move: $moved"
  jq . <<<"$moved" >"$work/cn1/lease.json.new" && mv "$work/cn1/lease.json.new" "$work/cn1/lease.json"
  new_endpoint=$(jq -r '.gpus[0].endpoint' <<<"$moved")
  [[ $new_endpoint == "${ADDR[$to]}:7100" ]] || fail "the lease moved to $new_endpoint, not to $to"
  wait "$program_pid" || fail "the program failed: $(cat "$work/program.log")"
  grep -q '^iterate: PASS' "$work/program.log" || fail "no PASS: $(cat "$work/program.log")"
  line=$(grep -o "recovered on [^ ]* at ${ADDR[$to]}:7100 in [0-9]* ms" "$work/program.log") ||
    fail "the program did not recover on $to: $(cat "$work/program.log")"
  step "a CUDA process on cn1 lost its GPU $leased and went on on $to, another host: $line; PASS"
  in_ns cn1 curl -sf -H "Authorization: MUNGE $(munge -S "$MUNGE_SOCKET" -s gpupool)" \
    -d "{\"id\":\"$lease\"}" "$head_url/v1/leases/release" >/dev/null || fail "cannot release $lease"
  for gpu in "$leased" "$sibling"; do ctl head update gpu="$gpu" state=resume >/dev/null; done
fi

# --installed: Slurm started in section 7's order, and a pooled job.
if ((installed)); then
  # Section 7's order: the publisher (its licences file) before slurmctld, then slurmd.
  start_unit head gpupool-capacity-publisher head "/var/lib/gpupool-publisher=$work/head/publisher"
  # The publisher writes gpupool_pools, then licenses.conf: wait for the file slurm.conf
  # includes, not the first one (a loaded machine runs between the two writes).
  for _ in $(seq 300); do
    grep -qx 'Licenses=gpupool_a100:4' "$work/head/publisher/licenses.conf" 2>/dev/null && break
    sleep 0.1
  done
  [[ -s $work/head/publisher/gpupool_pools ]] || fail "the publisher wrote no gpupool_pools"
  grep -qx 'Licenses=gpupool_a100:4' "$work/head/publisher/licenses.conf" 2>/dev/null ||
    fail "the publisher wrote no Licenses=gpupool_a100:4: $(cat "$work/head/publisher/licenses.conf" 2>&1)"
  ip netns exec "$(ns head)" unshare --uts sh -c 'hostname head && exec slurmctld -D' \
    >"$work/slurmctld.out" 2>&1 &
  pids+=($!)
  # `ip netns exec` mounts a sysfs of the namespace's own over /sys, which hides the
  # machine's cgroup mounts, and slurmd (22.05) will not start without them: the same
  # cgroup filesystems, mounted again in the node's mount namespace.
  cgroup_mounts=$(awk '$2 ~ /^\/sys\/fs\/cgroup/ && ($3 == "cgroup" || $3 == "cgroup2" || $3 == "tmpfs") {
    printf "mkdir -p %s && mount -t %s -o %s none %s && ", $2, $3, $4, $2 }' /proc/self/mounts)
  for host in cn1 cn2; do
    mkdir -p "$work/$host/slurmd"
    ip netns exec "$(ns "$host")" unshare --uts sh -c "hostname $host && $cgroup_mounts exec slurmd -D" \
      >"$work/slurmd-$host.out" 2>&1 &
    pids+=($!)
  done
  nodes_idle() { [[ $(in_ns cn1 sinfo -h -N -o '%N %T' | sort | tr '\n' ' ') == "cn1 idle cn2 idle " ]]; }
  for _ in $(seq 300); do nodes_idle && break; sleep 0.2; done
  nodes_idle || fail "cn1 and cn2 are not idle: $(in_ns cn1 sinfo -h -N -o '%N %T %E' 2>&1)"
  lic=$(in_ns head scontrol show lic gpupool_a100 -o 2>&1)
  grep -q 'Total=4 ' <<<"$lic" || fail "slurmctld's licence: $lic"
  step "slurmctld on head, slurmd on cn1 and cn2 (idle); $lic"

  # submit_pooled_job ITERATIONS SERVERS: a pooled job, submitted on a compute node with only its
  # --gpu-pool option, running the program on cn1 until it says it is running. Sets id
  # (the job), leased (its GPU), to (the other GPU host, where every spare is once
  # spare_elsewhere has run) and out (its output directory). SERVERS: the gpupoold URLs
  # the job must have been given (spank_gpupool's server=).
  out=$work/job
  mkdir -p "$out"
  # The batch script: which gpupoold the job was told of, then tests/remote's job script.
  # shellcheck disable=SC2016  # the job expands them
  printf '#!/bin/bash\necho "JOB server=${GPUPOOL_SERVER:-}"\nexec %q "$@"\n' \
    "$REPO/tests/remote/slurm_job.sh" >"$work/job.sh"
  chmod 755 "$work/job.sh"
  submit_pooled_job() {
    submitted_at=$SECONDS
    id=$(in_ns cn1 env UCX_TLS=tcp UCX_NET_DEVICES=eth0 sbatch --parsable --gpu-pool=a100:1 -w cn1 \
      -o "$out/%j.out" "$work/job.sh" "$program" "$1" 20 4 16 2>&1 | cut -d';' -f1) ||
      fail "sbatch failed: $id"
    [[ $id =~ ^[0-9]+$ ]] || fail "sbatch gave no job id: $id"
    for _ in $(seq 300); do grep -q '^iterate: running' "$out/$id.out" 2>/dev/null && break; sleep 0.2; done
    grep -q '^iterate: running' "$out/$id.out" ||
      fail "job $id did not start its program: $(in_ns head scontrol show job "$id" | grep -o 'JobState=[^ ]*\|Reason=[^ ]*'); $(cat "$out/$id.out" 2>&1)"
    leased=$(ctl head show leases job="$id" --json | jq -r '.leases[0].gpus[0].id')
    [[ $leased == gpuhost[12]:[01] ]] || fail "job $id's lease: $(ctl head show leases job="$id" -o)"
    grep -q "^JOB lease=L.* gpus=GPU-[^ ]*@10\.211\.0\.2[12]:7100 .* ld_library_path=/usr/lib/.*/gpupool\$" "$out/$id.out" ||
      fail "job $id did not get a GPU host's GPU and the installed library: $(grep "^JOB" "$out/$id.out")"
    grep -qxF "JOB server=$2" "$out/$id.out" ||
      fail "job $id was not told of gpupoold at $2: $(grep "^JOB" "$out/$id.out")"
    case ${leased%:*} in gpuhost1) to=gpu2 ;; gpuhost2) to=gpu1 ;; esac
  }
  # Every spare on the other GPU host (the leased GPU's sibling drained): the process must
  # move there.
  spare_elsewhere() {
    ctl head update gpu="${leased%:*}:$((1 - ${leased##*:}))" state=drain reason="netns_site: spare on the other host" >/dev/null
  }
  # finish_job: the job completes, its program recovered on the other host and printed PASS,
  # no node is drained and the job's lease is released.
  finish_job() {
    local state line
    for _ in $(seq 600); do
      state=$(in_ns head scontrol show job "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
      [[ $state == PENDING || $state == RUNNING || $state == CONFIGURING || $state == COMPLETING ]] || break
      sleep 0.2
    done
    [[ $state == COMPLETED ]] || fail "job $id ended $state: $(cat "$out/$id.out")"
    grep -q '^iterate: PASS' "$out/$id.out" || fail "job $id printed no PASS: $(cat "$out/$id.out")"
    line=$(grep -o "recovered on [^ ]* at ${ADDR[$to]}:7100 in [0-9]* ms" "$out/$id.out") ||
      fail "job $id's program did not recover on $to: $(cat "$out/$id.out")"
    step "job $id COMPLETED $((SECONDS - submitted_at)) s after its submission, PASS: $line"
    if in_ns cn1 sinfo -h -N -o '%T' | grep -qiE 'drain|down|fail'; then
      fail "a node is not idle: $(in_ns cn1 sinfo -h -N -o '%N %T %E')"
    fi
    leases_of_job() { ctl head show leases --json | jq --argjson j "$id" '[.leases[] | select(.job_id == $j)] | length'; }
    for _ in $(seq 50); do [[ $(leases_of_job) == 0 ]] && break; sleep 0.2; done
    [[ $(leases_of_job) == 0 ]] || fail "job $id's lease outlived it: $(ctl head show leases -o)"
    step "no node drained; the job's lease released"
  }

  submit_pooled_job 200 "$head_url"
  spare_elsewhere
  ctl head update gpu="$leased" state=fail reason="netns_site: failed mid-run" >/dev/null
  step "job $id runs $(basename "$program") on cn1 against $leased; failed it"
  finish_job
  step "the site without HA: PASS ($((SECONDS - site_start)) s)"

  # High availability, as docs/install.md section 9 tells an admin to turn it on for this
  # site: etcd members on head, head2 and quorum (the two head hosts and a third that only
  # votes, so that the control plane needs no GPU host nor compute node up, and losing one
  # head leaves a quorum), gpupoold on head and head2 with its state in etcd, over TLS with
  # client certificates and etcd auth on; every client told both replicas.
  ha_start=$SECONDS
  for unit in gpupool-capacity-publisher@head gpupool-agentd@gpu1 gpupool-agentd@gpu2 gpupoold@head; do
    stop_unit "$unit"
  done
  # The CA, the members' certificates, gpupoold's client certificate (no CN), the
  # passwords and the lease-token key, made once on the admin's machine (section 9).
  tls=$work/tls
  mkdir -m 700 "$tls"
  (
    set -e
    cd "$tls"
    umask 077
    newkey() { openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "$@"; }
    sign() {
      openssl x509 -req -in "$1.csr" -CA etcd-ca.pem -CAkey etcd-ca-key.pem -CAcreateserial \
        -days 3650 -extfile "$1.ext" -out "$1.pem"
    }
    newkey -x509 -keyout etcd-ca-key.pem -subj "/CN=netns site etcd CA" -days 3650 -out etcd-ca.pem
    for member in head head2 quorum; do
      newkey -keyout "$member-key.pem" -subj "/CN=$member" -out "$member.csr"
      printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
        "${ADDR[$member]}" "$member" >"$member.ext"
      sign "$member"
    done
    newkey -keyout etcd-client-key.pem -subj "/O=gpupool" -out etcd-client.csr
    printf 'extendedKeyUsage=clientAuth\n' >etcd-client.ext
    sign etcd-client
    for f in etcd.password etcd-root.password; do head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f"; done
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >token.key
  ) >"$work/openssl.log" 2>&1 || fail "openssl could not make the certificates: $(cat "$work/openssl.log")"

  # etcd (Debian's etcd-server) on its three hosts: /etc/etcd and /etc/default/etcd.
  etcd_members=(head head2 quorum)
  initial_cluster="" etcd_urls="" etcd_conf_urls=""
  for member in "${etcd_members[@]}"; do
    initial_cluster+="${initial_cluster:+,}$member=https://${ADDR[$member]}:2380"
    etcd_urls+="${etcd_urls:+,}https://${ADDR[$member]}:2379"
    etcd_conf_urls+="${etcd_conf_urls:+, }\"https://${ADDR[$member]}:2379\""
  done
  # `ip netns exec` mounts /etc/netns/NS/etcd over /etc/etcd, which must exist (Debian's
  # etcd-server makes none): made empty if missing, removed at exit.
  if [[ ! -d /etc/etcd ]]; then mkdir /etc/etcd && made_etc_etcd=1; fi
  for member in "${etcd_members[@]}"; do
    d=$(etc "$member")/etcd
    mkdir -p "$d" "$(etc "$member")/default"
    install -m 644 "$tls/etcd-ca.pem" "$d/ca.pem"
    install -m 644 "$tls/$member.pem" "$d/server.pem"
    install -m 600 -o etcd -g etcd "$tls/$member-key.pem" "$d/server-key.pem"
    # The data directory: under the test's directory, not /var/lib/etcd/default.
    install -d -m 700 -o etcd -g etcd "$work/$member/etcd"
    cat >"$(etc "$member")/default/etcd" <<EOF
ETCD_DATA_DIR=$work/$member/etcd
ETCD_LISTEN_PEER_URLS=https://${ADDR[$member]}:2380
ETCD_INITIAL_ADVERTISE_PEER_URLS=https://${ADDR[$member]}:2380
ETCD_LISTEN_CLIENT_URLS=https://${ADDR[$member]}:2379
ETCD_ADVERTISE_CLIENT_URLS=https://${ADDR[$member]}:2379
ETCD_INITIAL_CLUSTER=$initial_cluster
ETCD_INITIAL_CLUSTER_STATE=new
ETCD_INITIAL_CLUSTER_TOKEN=gpupool-netns-site
ETCD_MAX_TXN_OPS=1024
ETCD_CERT_FILE=/etc/etcd/server.pem
ETCD_KEY_FILE=/etc/etcd/server-key.pem
ETCD_TRUSTED_CA_FILE=/etc/etcd/ca.pem
ETCD_CLIENT_CERT_AUTH=true
ETCD_PEER_CERT_FILE=/etc/etcd/server.pem
ETCD_PEER_KEY_FILE=/etc/etcd/server-key.pem
ETCD_PEER_TRUSTED_CA_FILE=/etc/etcd/ca.pem
ETCD_PEER_CLIENT_CERT_AUTH=true
EOF
    start_unit "$member" etcd "$member"
  done
  # etcdctl as section 9 has the admin run it on an etcd host (its member's certificate);
  # endpoints=URL for one member.
  etcdctl_head() {
    in_ns head env ETCDCTL_API=3 ETCDCTL_ENDPOINTS="${endpoints:-$etcd_urls}" ETCDCTL_CACERT=/etc/etcd/ca.pem \
      ETCDCTL_CERT=/etc/etcd/server.pem ETCDCTL_KEY=/etc/etcd/server-key.pem timeout 20 etcdctl "$@"
  }
  for _ in $(seq 150); do etcdctl_head endpoint health >/dev/null 2>&1 && break; sleep 0.2; done
  etcdctl_head endpoint health >/dev/null 2>&1 || fail "etcd is not healthy: $(etcdctl_head endpoint health 2>&1)"
  # Auth on, gpupoold's user limited to its prefix (gpupoold(8), Securing etcd).
  for args in "role add gpupool" "role grant-permission gpupool --prefix=true readwrite /gpupool/" \
    "user add gpupool:$(cat "$tls/etcd.password")" "user grant-role gpupool gpupool" \
    "user add root:$(cat "$tls/etcd-root.password")" "user grant-role root root" "auth enable"; do
    # shellcheck disable=SC2086  # the words of one etcdctl command
    etcdctl_head $args >"$work/etcdctl.out" 2>&1 || fail "etcdctl ${args%%:*}: $(cat "$work/etcdctl.out")"
  done
  ! etcdctl_head get /gpupool/ --prefix >/dev/null 2>&1 || fail "etcd answers without a user once auth is on"
  etcd_denied=$(etcdctl_head --user "gpupool:$(cat "$tls/etcd.password")" put /elsewhere x 2>&1) &&
    fail "etcd's gpupool user may write outside /gpupool/"
  grep -q 'permission denied' <<<"$etcd_denied" || fail "etcd's gpupool user outside /gpupool/: $etcd_denied"
  step "etcd on head, head2 and quorum: healthy, TLS with client certificates, auth on ($((SECONDS - ha_start)) s)"

  # gpupoold on head and head2: section 9's files, the key, password and token key handed
  # over as systemd credentials (a drop-in, as `systemctl edit gpupoold` writes it).
  servers="http://${ADDR[head]}:6830,http://${ADDR[head2]}:6830"
  for h in head head2; do
    g=$(etc "$h")/gpupool
    install -m 644 "$tls/etcd-ca.pem" "$g/etcd-ca.pem"
    install -m 644 "$tls/etcd-client.pem" "$g/etcd-client.pem"
    install -m 600 "$tls/etcd-client-key.pem" "$g/etcd-client.key"
    install -m 600 "$tls/etcd.password" "$g/etcd.password"
    install -m 600 "$tls/token.key" "$g/token.key"
    mkdir -p "$(etc "$h")/systemd/system/gpupoold.service.d"
    cat >"$(etc "$h")/systemd/system/gpupoold.service.d/override.conf" <<EOF
[Service]
LoadCredential=etcd-client.key:/etc/gpupool/etcd-client.key
LoadCredential=etcd.password:/etc/gpupool/etcd.password
LoadCredential=token.key:/etc/gpupool/token.key
EOF
    mkdir -p "$work/$h/state"
    cat >"$(conf "$h")" <<EOF
$munge_line
gpupoold = {
  listen = "${ADDR[$h]}:6830";
  state_dir = "$work/$h/state";
  state = "etcd";
  etcd_endpoints = [ $etcd_conf_urls ];
  etcd_ca_file = "/etc/gpupool/etcd-ca.pem";
  etcd_cert_file = "/etc/gpupool/etcd-client.pem";
  etcd_key_file = "/run/credentials/gpupoold.service/etcd-client.key";
  etcd_user = "gpupool";
  etcd_password_file = "/run/credentials/gpupoold.service/etcd.password";
  token_key_file = "/run/credentials/gpupoold.service/token.key";
};
pools = (
  { name = "a100"; models = [ "*A100*" ]; }
);
client = { server = "$servers"; };
EOF
  done
  # Every client told both replicas: gpupoolctl's, the agents', the plugin's, the publisher's.
  sed -i "s|server = \"$head_url\"|server = \"$servers\"|" "$(conf cn1)" "$(conf gpu1)" "$(conf gpu2)"
  for host in head cn1 cn2; do
    sed -i "s|server=$head_url |server=$servers |" "$(etc "$host")/slurm/plugstack.conf.d/gpupool.conf"
  done
  sed -i "s|^GPUPOOL_SERVER=.*|GPUPOOL_SERVER=$servers|" "$(etc head)/default/gpupool-capacity-publisher"
  start_unit head gpupoold head
  start_unit head2 gpupoold head2
  role_of() { in_ns cn1 curl -sf --max-time 2 "http://${ADDR[$1]}:6830/v1/ping" | jq -r '.role // empty'; }
  roles() { echo "$(role_of head) $(role_of head2)"; }
  for _ in $(seq 150); do [[ $(roles) == "leader follower" || $(roles) == "follower leader" ]] && break; sleep 0.2; done
  case $(roles) in
    "leader follower") leader=head standby=head2 ;;
    "follower leader") leader=head2 standby=head ;;
    *) fail "gpupoold on head and head2 are not a leader and a follower: $(roles)" ;;
  esac
  for h in head head2; do
    ! grep -q 'token_key_file' "$work/gpupoold-$h.log" || fail "gpupoold on $h: $(grep token_key_file "$work/gpupoold-$h.log")"
  done
  for gpu in gpu1 gpu2; do start_unit "$gpu" gpupool-agentd "gpuhost${gpu#gpu}"; done
  for _ in $(seq 150); do registered && break; sleep 0.2; done
  registered || fail "not every GPU registered IDLE with the replicas: $(ctl cn1 show gpus -o)"
  start_unit head gpupool-capacity-publisher head "/var/lib/gpupool-publisher=$work/head/publisher"
  step "gpupoold on head and head2 ($leader leads), state in etcd; both GPU hosts registered again ($((SECONDS - ha_start)) s)"

  # A pooled job; its gpupoold leader dies (kill -9, by pid); the standby takes over and the
  # job's GPU, failed then, is still swapped.
  # The plugstack line edited, slurmd not restarted: the job is told of both replicas.
  submit_pooled_job 250 "$servers"
  killed_at=$SECONDS killed_ms=$(($(date +%s%N) / 1000000))
  kill -9 "${unit_pid[gpupoold@$leader]}"
  wait "${unit_pid[gpupoold@$leader]}" 2>/dev/null || true
  for _ in $(seq 150); do [[ $(role_of "$standby") == leader ]] && break; sleep 0.1; done
  [[ $(role_of "$standby") == leader ]] || fail "gpupoold on $standby did not take over: $(role_of "$standby")"
  takeover_ms=$(($(date +%s%N) / 1000000 - killed_ms))
  step "job $id runs on cn1 against $leased ($((killed_at - submitted_at)) s after its submission); gpupoold on $leader killed, $standby leads $takeover_ms ms later"
  spare_elsewhere
  ctl head update gpu="$leased" state=fail reason="netns_site: failed mid-run, after the failover" >/dev/null
  finish_job
  # systemd's Restart= brings the killed replica back: it follows.
  start_unit "$leader" gpupoold "$leader"
  for _ in $(seq 100); do [[ $(role_of "$leader") == follower ]] && break; sleep 0.1; done
  [[ $(role_of "$leader") == follower ]] || fail "gpupoold on $leader came back as '$(role_of "$leader")', not a follower"
  step "gpupoold on $leader back: a follower"
  # Section 10's etcd backup: a snapshot of one member, as etcd's root.
  endpoints="https://${ADDR[head]}:2379" etcdctl_head --user "root:$(cat "$tls/etcd-root.password")" \
    snapshot save "$work/etcd-backup.db" >"$work/etcdctl.out" 2>&1 || fail "etcdctl snapshot save: $(cat "$work/etcdctl.out")"
  keys=$(etcdctl_head snapshot status "$work/etcd-backup.db" -w json | jq -r '.totalKey')
  ((keys > 0)) || fail "the etcd snapshot holds $keys keys"
  step "etcd backed up (snapshot save): $keys keys"
  step "the site with HA: PASS ($((SECONDS - ha_start)) s)"
  step "PASS"
  exit 0
fi

# A GPU host cut off from the switch: its GPUs go UNREACHABLE (unreachable_timeout, 15 s
# by default), and return to IDLE by themselves once its cable is back.
in_ns switch ip link set p-gpu2 down
state_of_host() { ctl cn1 show gpus --json | jq -r --arg h "$1" '[.gpus[] | select(.host == $h) | .state] | unique | join(",")'; }
for _ in $(seq 150); do [[ $(state_of_host gpuhost2) == UNREACHABLE ]] && break; sleep 0.2; done
[[ $(state_of_host gpuhost2) == UNREACHABLE ]] || fail "gpuhost2 cut off, but its GPUs are $(state_of_host gpuhost2)"
[[ $(state_of_host gpuhost1) == IDLE ]] || fail "gpuhost1's GPUs are $(state_of_host gpuhost1) while gpuhost2 is cut off"
in_ns switch ip link set p-gpu2 up
for _ in $(seq 150); do [[ $(state_of_host gpuhost2) == IDLE ]] && break; sleep 0.2; done
[[ $(state_of_host gpuhost2) == IDLE ]] || fail "gpuhost2 is back on the switch, but its GPUs are $(state_of_host gpuhost2)"
step "gpuhost2 cut off: UNREACHABLE; back on the switch: IDLE again"
step "PASS"
