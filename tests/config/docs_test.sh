#!/bin/sh
# Keeps the config's documentation honest: every key the strict loader accepts
# (common/config.cc's CheckKeys lists) is set in the example etc/gpupool.conf and described
# in man/gpupool.conf.5; and the man pages of gpupoold, gpupoolctl and gpupool.conf render
# without groff warnings.
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

for p in gpupoold.8 gpupoolctl.1 gpupool.conf.5; do
  warnings=$(groff -man -ww -z "$root/man/$p" 2>&1)
  if [ -n "$warnings" ]; then
    echo "man/$p: $warnings" >&2
    fail=1
  fi
  # Every page names itself and has the sections admins look for.
  for section in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
    grep -q "^\.SH \"*$section" "$root/man/$p" || { echo "man/$p has no $section section" >&2; fail=1; }
  done
done
[ $fail -eq 0 ] && echo "$count config keys documented; man pages clean"
exit $fail
