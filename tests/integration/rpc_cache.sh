#!/usr/bin/env bash
# A worker with --cache keeps weights by content hash: the second start of a client, and a
# client of the restarted worker, send no weight bytes (stats show it), and the output is that
# of one machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
ref=$(greedy local -m "$model" -n 24 -t 1)
mkdir -p "$tmp/cache"
start_worker cached --cache "$tmp/cache"

# weights FILE: "sent large_sent cached" from the weights line of the stats.
weights() {
  sed -n 's/.*weights: \([0-9]*\) bytes sent (\([0-9]*\) in chunks >= 1 MiB), \([0-9]*\) bytes from.*/\1 \2 \3/p' "$1" | head -n 1
}

run_once() {
  local got
  got=$(STRATA_RPC_STATS=1 greedy "$1" -m "$model" -n 24 -t 1 --rpc "$addr" --device RPC0,CPU -ts 3,1)
  [ "$got" = "$ref" ] || fail "$1: output differs from one machine"
  read -r sent large cached <<<"$(weights "$tmp/$1.err")"
  [ -n "$sent" ] || { cat "$tmp/$1.err"; fail "$1: no weights line in the stats"; }
  echo "$1: $sent weight bytes sent ($large in large chunks), $cached from the cache"
}

run_once first
[ "$large" -gt 0 ] && [ "$cached" -eq 0 ] || fail "the first start must send the weights"
first_sent=$sent
run_once second
[ "$sent" -eq 0 ] || fail "the second start sent $sent bytes of weights again"
[ "$cached" -eq "$first_sent" ] || fail "the cache served $cached bytes, not $first_sent"

kill "$last_pid"
wait "$last_pid" 2>/dev/null || true
start_worker restarted --cache "$tmp/cache"
run_once third
[ "$sent" -eq 0 ] || fail "the restarted worker's cache was not used"
echo "ok"
