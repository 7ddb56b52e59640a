#!/bin/sh
# Keeps the config's documentation honest: every key the strict loader accepts
# (common/config.cc's CheckKeys lists) is set in the example etc/gpupool.conf and described
# in man/gpupool.conf.5; every man page renders without groff warnings; and the runbook
# and user guide (docs/install.md, docs/user-guide.md) and README.md name only what the
# code has: gpupool.conf keys the loader accepts, GPUPOOL_* variables some program or
# script reads or sets, --gpu-pool options spank_gpupool registers, plugstack arguments
# it parses, and units and example files the tree ships.
#   docs_test.sh REPO_ROOT
set -eu
[ $# -eq 1 ] || { echo "usage: $0 REPO_ROOT" >&2; exit 2; }
root=$1
loader=$root/common/config.cc
example=$root/etc/gpupool.conf
page=$root/man/gpupool.conf.5
fail=0

keys=$(tr '\n' ' ' <"$loader" | grep -o 'CheckKeys([^;]*;' | grep -o '"[a-z_]*"' | tr -d '"' | sort -u)
count=$(echo "$keys" | wc -w)
# The loader knows more than 30 keys; fewer means this extraction broke, not that keys went.
if [ "$count" -lt 30 ]; then
  echo "found only $count keys in $loader: has the CheckKeys layout changed?" >&2
  exit 1
fi
for key in $keys; do
  if ! grep -Eq "^[[:space:]]*(\{ *)?$key[[:space:]]*=|[{;][[:space:]]*$key[[:space:]]*=" "$example"; then
    echo "etc/gpupool.conf does not set '$key'" >&2
    fail=1
  fi
  if ! grep -Eq "(^\.BR? |\\\\fB|^\.SH SECTION )$key([^a-z_]|$)" "$page"; then
    echo "man/gpupool.conf.5 does not describe '$key'" >&2
    fail=1
  fi
done

for path in "$root"/man/*.[1-8]; do
  p=${path##*/}
  # A page that is only ".so man8/OTHER" (gpupool-capacity-publisher.8) names a page of man/.
  if target=$(sed -n 's|^\.so man[1-8]/||p' "$path") && [ -n "$target" ]; then
    [ -f "$root/man/$target" ] || { echo "man/$p: .so names $target, not in man/" >&2; fail=1; }
    continue
  fi
  warnings=$(groff -man -ww -z "$path" 2>&1)
  if [ -n "$warnings" ]; then
    echo "man/$p: $warnings" >&2
    fail=1
  fi
  # Every page names itself and has the sections admins look for (an overview in
  # section 7 has no synopsis).
  sections='NAME DESCRIPTION SEE_ALSO'
  case $p in *.7) ;; *) sections="$sections SYNOPSIS" ;; esac
  for section in $sections; do
    section=$(echo "$section" | tr _ ' ')
    grep -q "^\.SH \"*$section" "$root/man/$p" || { echo "man/$p has no $section section" >&2; fail=1; }
  done
done
# The guides. Config keys: "key = " at the start of a line or after "{" / ";" inside a
# fenced block that holds a gpupool.conf group (a line ending in "= {" or "= (").
guides="$root/docs/install.md $root/docs/user-guide.md $root/README.md"
for guide in $guides; do
  [ -f "$guide" ] || { echo "${guide#"$root"/} is missing" >&2; fail=1; continue; }
  used=$(awk '/^```/ { inblock = !inblock; conf = 0; next }
              inblock && /= [{(][[:space:]]*$/ { conf = 1 }
              inblock && conf { print }' "$guide" |
    grep -oE '(^|[{;])[[:space:]]*[a-z_]+[[:space:]]*=' | grep -oE '[a-z_]+' | sort -u)
  for key in $used; do
    case " $(echo $keys) gpupoold pools gpus agent client sim " in
      *" $key "*) ;;
      *) echo "${guide#"$root"/}: gpupool.conf key '$key' is not one the loader accepts" >&2; fail=1 ;;
    esac
  done
  for var in $(grep -oE 'GPUPOOL_[A-Z_]*[A-Z]' "$guide" | sort -u); do
    if ! grep -rqF "$var" "$root/common" "$root/poold" "$root/remote" "$root/spank" \
      "$root/gres" "$root/scripts" "$root/etc" "$root/cmake"; then
      echo "${guide#"$root"/}: $var is read or set by nothing in the tree" >&2
      fail=1
    fi
  done
  for opt in $(grep -oE -- '--gpu-pool[a-z-]*' "$guide" | sort -u); do
    if ! grep -qF "\"${opt#--}\"" "$root/spank/job_request.h"; then
      echo "${guide#"$root"/}: $opt is not an option spank_gpupool registers" >&2
      fail=1
    fi
  done
  for unit in $(grep -oE '(gpupoold|gpupool-agentd|gpupool-capacity-publisher)\.service' "$guide" | sort -u); do
    [ -f "$root/etc/$unit" ] || [ -f "$root/etc/$unit.in" ] ||
      { echo "${guide#"$root"/}: no unit $unit in etc/" >&2; fail=1; }
  done
  for example in $(grep -oE '/usr/share/gpupool/examples/[a-z_.]+' "$guide" | sort -u); do
    [ -f "$root/etc/${example##*/}" ] ||
      { echo "${guide#"$root"/}: $example is not an example the tree ships" >&2; fail=1; }
  done
done
# plugstack.conf arguments named as "arg=" in the install guide's prose.
plugstack_keys=$(tr '\n' ' ' <"$root/spank/plugin_config.cc" | grep -o 'PluginConfigKeys() {[^}]*}' |
  grep -o '"[a-z_]*"' | tr -d '"')
[ -n "$plugstack_keys" ] || { echo "cannot read spank/plugin_config.cc's PluginConfigKeys" >&2; fail=1; }
for arg in $(grep -oE '`(server|timeout|retry|profile|profile_dir|lib_dir|lease_dir|munge_socket|ttl|watch_interval|notify|[a-z_]+)=`' "$root/docs/install.md" | tr -d '`=' | sort -u); do
  case " $(echo $plugstack_keys) " in
    *" $arg "*) ;;
    *) echo "docs/install.md: plugstack argument '$arg=' is not one spank_gpupool parses" >&2; fail=1 ;;
  esac
done
[ $fail -eq 0 ] && echo "$count config keys documented; man pages clean; guides name only what exists"
exit $fail
