#!/usr/bin/env bash
# A smoke run of bench/pipeline.sh --quick: workers, proxies, servers with 1 and 2 pipeline
# groups and the load client all start, every request succeeds, every row has RPC counters,
# and the greedy md5s of every configuration equal the run without a split (the script
# exits non-zero otherwise). Numbers are printed, never checked.
set -eu
strata=$1
# Its subject is the bench script's table. Under a sanitizer it is skipped: the workers, proxies,
# hand-off and pipeline groups it starts run under ASan in rpc_proxy.sh, rpc_split.sh, moe.sh and
# the server's unit tests, and here they would only run slower (about 50 s on 2 cores).
if [ "${STRATA_TEST_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: the bench script's smoke run is checked in the Release build"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
for tool in curl jq; do
  command -v $tool >/dev/null || { echo "SKIP: needs $tool"; exit 77; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bash "$here/../../bench/pipeline.sh" "$strata" --quick >"$out" || { cat "$out"; echo "FAIL: bench/pipeline.sh --quick"; exit 1; }
cat "$out"
# The main table's rows have 13 columns (15 fields split on '|'); the ratio tables have fewer.
rows=$(awk -F'|' 'NF == 15 && $2 ~ /-sampling\//' "$out" | wc -l)
[ "$rows" = 16 ] || { echo "FAIL: expected 16 split rows (4 arms, N 1 and 2, two links), got $rows"; exit 1; }
# Hand-off takes the hidden state off the server's path: fewer round trips per step than the
# star path of the same sampling, N and link (counted from the server's RPC counters, not timed).
worse=$(awk -F'|' 'NF == 15 && $2 ~ /-sampling\// {
    split($2, arm, "/"); key = arm[1] "|" $3 "|" $4 "|" $5
    if ($2 ~ /star/) star[key] = $10; else hand[key] = $10 }
  END { for (k in hand) if (!(k in star) || hand[k] + 0.2 > star[k]) print k, hand[k], star[k] }' "$out")
[ -z "$worse" ] || { echo "FAIL: hand-off without a round trip fewer per step:"; echo "$worse"; exit 1; }
# Every split row: no request failed, and the step counters moved (numbers, not "-").
bad=$(awk -F'|' 'NF == 15 && $2 ~ /-sampling\// && ($13 + 0 != 0 || $9 !~ /[0-9]/)' "$out")
[ -z "$bad" ] || { echo "FAIL: rows with errors or without RPC counters:"; echo "$bad"; exit 1; }
grep -q "equal to the local run: yes" "$out" || { echo "FAIL: md5s differ"; exit 1; }
echo "ok"
