# layout.sh: where every part of the dev cluster lives (paths, ports, topology).
#
# Sourced by scripts/devcluster. Everything is derived from three inputs so that several
# dev clusters can run side by side on one machine:
#   GPUPOOL_DEVDIR        state directory (default /tmp/gpupool-dev)
#   GPUPOOL_DEV_PORTBASE  first port (default 16800); see the port map below
#   GPUPOOL_BUILD         build tree holding bin/ and lib/ (default <repo>/build)
#   GPUPOOL_DEV_PREFIX    run installed files instead (e.g. /usr; see below)
# Nothing here starts a process.

REPO=$(cd "$SCRIPT_DIR/.." && pwd)
DEVDIR=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}
BUILD=${GPUPOOL_BUILD:-$REPO/build}
PORTBASE=${GPUPOOL_DEV_PORTBASE:-16800}
NODES=${GPUPOOL_DEV_NODES:-2}
# Seconds `up` waits for every part to answer before it names the one that did not.
UP_TIMEOUT=${GPUPOOL_DEV_TIMEOUT:-60}

# Port map (base = PORTBASE): slurmctld base, slurmd base+1.., gpupoold base+10,
# a test's stand-in gpupoold base+15, agents' data endpoints base+20.., agents' control
# APIs base+30.., an agent that tests start to join the cluster (JOIN_HOST) base+29,
# MariaDB base+40, slurmdbd base+41; with GPUPOOL_DEV_HA=1, etcd base+43..48 and the
# second gpupoold base+49.
CTLD_PORT=$PORTBASE
POOLD_PORT=$((PORTBASE + 10))
slurmd_port() { echo $((PORTBASE + $1)); }          # $1 = node number (1-based)
agent_port() { echo $((PORTBASE + 19 + $1)); }      # $1 = gpu host number (1-based)
control_port() { echo $((PORTBASE + 29 + $1)); }
JOIN_AGENT_PORT=$((PORTBASE + 29))
MARIADB_PORT=$((PORTBASE + 40))
DBD_PORT=$((PORTBASE + 41))

POOLD_URL="http://127.0.0.1:$POOLD_PORT"
CLUSTER_NAME=gpupooldev

# High availability (GPUPOOL_DEV_HA=1): a 3-member etcd (client ports base+43..45, peer
# ports base+46..48) and a second gpupoold replica (base+49); every client names both.
HA=${GPUPOOL_DEV_HA:-0}
[[ $HA == 0 || $HA == 1 ]] || { echo "devcluster: GPUPOOL_DEV_HA must be 0 or 1, not '$HA'" >&2; exit 1; }
ETCD_MEMBERS=3
etcd_client_port() { echo $((PORTBASE + 42 + $1)); }  # $1 = member number (1-based)
etcd_peer_port() { echo $((PORTBASE + 45 + $1)); }
POOLD2_PORT=$((PORTBASE + 49))
POOLD2_URL="http://127.0.0.1:$POOLD2_PORT"
# What clients are given: one URL, or both replicas' (they follow the leader).
POOLD_SERVERS=$POOLD_URL
((HA)) && POOLD_SERVERS="$POOLD_URL,$POOLD2_URL"
ETCD_DIR=$DEVDIR/etcd
# etcd is locked down as a site's should be (gpupoold(8), ETCD SECURITY): TLS for clients
# and peers with certificates made at `up` (openssl), client certificates required, and
# etcd auth on, gpupoold's user holding a role limited to ETCD_PREFIX. Everything in
# ETCD_TLS_DIR (0700): ca.pem, server.pem/-key.pem (every member, also its peer and
# gateway client certificate), gpupool.pem/-key.pem (no CN: etcd's gateway refuses one),
# gpupool.password and root.password (etcd's root, for setting users up and for tests).
ETCD_TLS_DIR=$DEVDIR/etcd-tls
ETCD_PREFIX=/gpupool-dev/
ETCD_USER=gpupool
etcd_client_url() { echo "https://127.0.0.1:$(etcd_client_port "$1")"; }
etcd_peer_url() { echo "https://127.0.0.1:$(etcd_peer_port "$1")"; }

# Files.
LOGDIR=$DEVDIR/log
PIDDIR=$DEVDIR/pids
MUNGE_DIR=$DEVDIR/munge
MUNGE_SOCK=$MUNGE_DIR/munge.socket  # what tests/lib/private-munged makes in $MUNGE_DIR
PRIVATE_MUNGED=$REPO/tests/lib/private-munged
SLURM_CONF_FILE=$DEVDIR/slurm.conf
LICENSES_CONF=$DEVDIR/licenses.conf
PLUGSTACK_CONF=$DEVDIR/plugstack.conf
GPUPOOL_CONF_FILE=$DEVDIR/gpupool.conf
ENV_FILE=$DEVDIR/env
EPILOG_SCRIPT=$DEVDIR/epilog.sh
# Accounting: a MariaDB of the dev cluster's own (data, socket, its init SQL holding the
# slurm user's password: the directory is 0700) and slurmdbd, which finds slurmdbd.conf
# beside slurm.conf.
MARIADB_DIR=$DEVDIR/mariadb
MARIADB_DATA=$MARIADB_DIR/data
MARIADB_SOCK=$MARIADB_DIR/mariadb.sock
MARIADB_INIT_SQL=$MARIADB_DIR/init.sql
SLURMDBD_CONF=$DEVDIR/slurmdbd.conf
ACCT_DB=slurm_acct_db
ACCT_DB_USER=slurm
# Every job of the dev cluster's users is charged to this account (sacctmgr, `up`).
ACCT_ACCOUNT=pooldev

# Binaries built by the project.
GPUPOOLD_BIN=$BUILD/bin/gpupoold
AGENTD_BIN=$BUILD/bin/gpupool-agentd
PUBLISHER_BIN=$REPO/scripts/capacity-publisher
SPANK_SO=$BUILD/lib/spank_gpupool.so
SPANK_STUB_SO=$BUILD/lib/gpupool_option_stub.so  # tests/gres; used only without SPANK_SO
GRES_PLUGIN_DIR=$BUILD/lib/slurm     # holds gres_gpupool.so once gres/ is built
JOB_SUBMIT_LUA=$REPO/etc/job_submit.lua

# GPUPOOL_DEV_PREFIX: the installed files (Debian packages, `cmake --install`), laid out
# as cmake/install.cmake does: programs in PREFIX/sbin, both plugins in Slurm's plugin
# directory (found there by Slurm itself, so nothing is linked into $DEVDIR/plugins), and
# the plugstack line's profile_dir and lib_dir as the installed plugstack.conf.d names them.
if [[ -n ${GPUPOOL_DEV_PREFIX:-} ]]; then
  prefix=${GPUPOOL_DEV_PREFIX%/}
  etc=$prefix/etc
  [[ $prefix == /usr ]] && etc=/etc  # GNUInstallDirs' rule for the prefix /usr
  BUILD=$prefix
  GPUPOOLD_BIN=$prefix/sbin/gpupoold
  AGENTD_BIN=$prefix/sbin/gpupool-agentd
  PUBLISHER_BIN=$prefix/sbin/gpupool-capacity-publisher
  SPANK_SO=$(compgen -G "$prefix/lib/*/slurm-wlm/spank_gpupool.so" ||
    compgen -G "$prefix/lib*/slurm/spank_gpupool.so" || echo "$prefix/lib/slurm/spank_gpupool.so")
  SPANK_SO=${SPANK_SO%%$'\n'*}
  GRES_PLUGIN_DIR=""
  JOB_SUBMIT_LUA=$prefix/share/gpupool/examples/job_submit.lua
  remoting_dir=$(compgen -G "$prefix/lib/*/gpupool/libcuda.so.1" || echo "$prefix/lib/gpupool/x")
  GPUPOOL_DEV_SPANK_ARGS="profile_dir=$etc/gpupool/profiles lib_dir=${remoting_dir%/*}${GPUPOOL_DEV_SPANK_ARGS:+ $GPUPOOL_DEV_SPANK_ARGS}"
  unset prefix etc remoting_dir
fi

# Simulated GPU topology: host rack model memory count.
# a100 and h100 span both racks (8 GPUs each); l40s is a pool of exactly 4, so that tests
# can exhaust a whole pool without touching the GPUs other tests lease.
GPU_HOSTS=(
  "gpuhost1 rack1 A100-SXM4-80GB 80G 4"
  "gpuhost2 rack1 H100-SXM5-80GB 80G 4"
  "gpuhost3 rack2 A100-SXM4-80GB 80G 4"
  "gpuhost4 rack2 H100-SXM5-80GB 80G 4"
  "gpuhost5 rack2 L40S-PCIE-48GB 48G 4"
)
# A GPU host that is not part of the cluster until a test starts its agent ("an agent
# joining"): its GPUs form the l4 pool, which is empty (total 0) before it first joins.
JOIN_HOST="gpuhost6 rack1 L4-PCIE-24GB 24G 2"
# Pools: name model-glob. Totals are counted from GPU_HOSTS.
POOLS=("a100 A100*" "h100 H100*" "l40s L40S*" "l4 L4-*")
# Per-node limit of remote GPUs a compute node can drive (GRES gpupool count).
NODE_GPU_LIMIT=${GPUPOOL_DEV_NODE_GPUS:-8}

# Number of simulated GPUs whose model matches glob $1.
pool_total() {
  local glob=$1 total=0 host rack model mem count
  for entry in "${GPU_HOSTS[@]}"; do
    read -r host rack model mem count <<<"$entry"
    # shellcheck disable=SC2053  # glob match is the point
    [[ $model == $glob ]] && total=$((total + count))
  done
  echo "$total"
}

# Every part `up` starts, in start order. `down` stops them in reverse.
all_parts() {
  echo munge
  echo mariadb
  echo slurmdbd
  echo slurmctld
  local i
  for ((i = 1; i <= NODES; i++)); do echo "slurmd-node$i"; done
  if ((HA)); then
    for ((i = 1; i <= ETCD_MEMBERS; i++)); do echo "etcd$i"; done
  fi
  echo gpupoold
  ((HA)) && echo gpupoold2
  for entry in "${GPU_HOSTS[@]}"; do echo "agent-${entry%% *}"; done
  echo publisher
}

# Parts that only `join` starts; `down` stops them too.
extra_parts() { echo "agent-${JOIN_HOST%% *}"; }
