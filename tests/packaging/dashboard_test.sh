#!/usr/bin/env bash
# shellcheck disable=SC2016  # $pool in the queries is a Grafana variable
# dashboard_test.sh GPUPOOLD PORT DASHBOARD: every query of the Grafana dashboard names
# only metrics, and groups/matches only on labels, that a real gpupoold exports.
#
# Starts GPUPOOLD (no MUNGE: /metrics needs none) with two pools on 127.0.0.1:PORT, reads
# its /metrics, and checks each panel target's `expr` and each template variable's query
# of DASHBOARD. It first runs the same check on queries with a wrong metric name and a
# wrong label, which must be refused, so a checker that passes everything fails the test.
# Exit 0 when all is well; 1 with the offending query on stderr.
set -euo pipefail

gpupoold=${1:?usage: dashboard_test.sh GPUPOOLD PORT DASHBOARD}
port=${2:?usage: dashboard_test.sh GPUPOOLD PORT DASHBOARD}
dashboard=${3:?usage: dashboard_test.sh GPUPOOLD PORT DASHBOARD}
fail() { echo "dashboard_test: $*" >&2; exit 1; }

work=$(mktemp -d /tmp/gpupool-dashboard.XXXXXX)
pid=""
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/gpupool.conf" <<EOF
gpupoold = {
  listen = "127.0.0.1:$port";
  state_dir = "$work/state";
  slurm_reap = false;
  enforce_licenses = false;  # no Slurm here: root leases made-up jobs
  reap_interval = 0;
};
pools = (
  { name = "a100"; models = [ "*A100*" ]; },
  { name = "h100"; models = [ "*H100*" ]; }
);
EOF
"$gpupoold" -D -f "$work/gpupool.conf" >"$work/gpupoold.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  curl -sf --max-time 1 "http://127.0.0.1:$port/v1/ping" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "gpupoold exited: $(tail -n 3 "$work/gpupoold.log")"
  sleep 0.1
done
curl -sf --max-time 5 "http://127.0.0.1:$port/metrics" >"$work/metrics" ||
  fail "no /metrics from gpupoold: $(tail -n 3 "$work/gpupoold.log")"

# What gpupoold exports: sample names, and the label names seen on any sample.
grep -v '^#' "$work/metrics" | sed -E 's/[{ ].*//' | sort -u >"$work/names"
grep -v '^#' "$work/metrics" | grep -oE '[{,][a-zA-Z_][a-zA-Z0-9_]*=' | tr -d '{,=' |
  sort -u >"$work/labels"
[[ -s $work/names ]] || fail "gpupoold's /metrics has no samples"

# check_query QUERY: prints what QUERY names that gpupoold does not export; exit 1 if any.
# PromQL is reduced to its metric names: strings, range selectors and function calls go;
# `by (...)` / `without (...)` and {matchers} give the label names it uses.
check_query() {
  local q=$1 rest bad=0 word label
  for label in $(grep -oE '\b(by|without|on|ignoring)[[:space:]]*\([^)]*\)' <<<"$q" |
    sed -E 's/^[a-z]+[[:space:]]*\(//; s/\)$//; s/,/ /g') \
    $(grep -oE '\{[^}]*\}' <<<"$q" | grep -oE '[a-zA-Z_][a-zA-Z0-9_]*[[:space:]]*(=~|!~|!=|=)' |
      grep -oE '^[a-zA-Z_][a-zA-Z0-9_]*'); do
    grep -qxF "$label" "$work/labels" || { echo "label '$label'"; bad=1; }
  done
  rest=$(sed -E 's/"[^"]*"//g; s/\{[^}]*\}//g; s/\[[^]]*\]//g;
    s/\b(by|without|on|ignoring|group_left|group_right)[[:space:]]*\([^)]*\)//g;
    s/[a-zA-Z_][a-zA-Z0-9_]*[[:space:]]*\(/(/g' <<<"$q")
  for word in $(grep -oE '[a-zA-Z_:][a-zA-Z0-9_:]*' <<<"$rest" || true); do
    case $word in and | or | unless | bool | offset) continue ;; esac
    grep -qxF "$word" "$work/names" || { echo "metric '$word'"; bad=1; }
  done
  return $bad
}

# The checker refuses what it must. ($pool is a Grafana variable, not the shell's.)
check_query 'rate(gpupool_leases_acquired_totl[5m])' >/dev/null &&
  fail "checker accepted a misspelt metric name"
check_query 'sum by (rack) (gpupool_gpus)' >/dev/null && fail "checker accepted an unknown label"
check_query 'gpupool_gpus{pool=~"$pool",zone="x"}' >/dev/null && fail "checker accepted an unknown matcher label"
check_query 'sum by (pool, state) (gpupool_gpus{pool=~"$pool"})' >/dev/null ||
  fail "checker refused a good query"

# Every query of the dashboard: panel targets, and template variables' label_values().
jq -r '.. | objects | select(has("expr")) | .expr' "$dashboard" >"$work/exprs"
jq -r '.templating.list[] | select(.type == "query") | .query.query // .query' "$dashboard" |
  sed -nE 's/^label_values\(([^,]*),[[:space:]]*([^)]*)\)$/\1{\2="x"}/p' >>"$work/exprs"
count=$(grep -c . "$work/exprs" || true)
((count >= 10)) || fail "only $count queries found in $dashboard"
errors=0
while IFS= read -r q; do
  if ! out=$(check_query "$q"); then
    echo "dashboard_test: not exported by gpupoold: ${out//$'\n'/, } in: $q" >&2
    errors=1
  fi
  # A query that names no gpupool metric at all would pass vacuously.
  grep -q 'gpupool_' <<<"$q" || { echo "dashboard_test: names no gpupool metric: $q" >&2; errors=1; }
done <"$work/exprs"
((errors == 0)) || exit 1

# What the dashboard is for: GPUs per pool and state, leases, swaps, recoveries, latency.
for metric in gpupool_gpus gpupool_pool_usable gpupool_leases gpupool_swaps_total \
  gpupool_leases_degraded_total gpupool_gpu_failures_total gpupool_request_duration_seconds_bucket; do
  grep -q "\b$metric\b" "$work/exprs" || fail "no query shows $metric"
done
echo "dashboard_test: $count queries, all on metrics and labels gpupoold exports"
