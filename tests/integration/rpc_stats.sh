#!/usr/bin/env bash
# STRATA_RPC_STATS: a decode step costs one round trip and at most three messages per remote
# stage (SET_TENSORS + GRAPH_RECOMPUTE + GET_TENSORS), at batch 1 and at batch 16; turning the
# batching of reads off (STRATA_RPC_NO_BATCHED_GET=1) costs more round trips, which shows that
# the counters see the difference. Two workers that hand the hidden state to each other: the
# first costs two one-way messages per step and no round trip, and nothing comes back from it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
start_worker a
A=$addr
start_worker b
B=$addr

# per_step FILE ENDPOINT: "messages round_trips" of the endpoint's total block.
per_step() {
  awk -v ep="$2" '
    $1 == "rpc" && $3 == "total:" { inside = index($2, ep) > 0; next }
    inside && $1 == "per" { gsub(",", ""); print $5, $7; exit }' "$1"
}

# check_ep LABEL ENDPOINT MAX_MESSAGES MAX_TRIPS MIN_TRIPS FILE
check_ep() {
  local label=$1 ep=$2 max_messages=$3 max_trips=$4 min_trips=$5 f=$6 line msgs trips
  line=$(per_step "$f" "$ep")
  [ -n "$line" ] || { cat "$f"; fail "$label: no per-step stats for $ep"; }
  read -r msgs trips <<<"$line"
  echo "$label $ep: $msgs messages, $trips round trips per step"
  awk -v m="$msgs" -v t="$trips" -v mm="$max_messages" -v mt="$max_trips" -v nt="$min_trips" \
    'BEGIN { exit !(m <= mm && t <= mt && t >= nt) }' ||
    { cat "$f"; fail "$label: $msgs messages and $trips round trips per step at $ep"; }
}

check() {
  local ep
  for ep in "$A" "$B"; do check_ep "$1" "$ep" "$2" "$3" "$4" "$5"; done
}

# received FILE ENDPOINT: bytes received per step from the endpoint.
received() {
  awk -v ep="$2" '
    $1 == "rpc" && $3 == "total:" { inside = index($2, ep) > 0; next }
    inside && $1 == "per" { gsub(",", ""); print $13; exit }' "$1"
}

# Under a sanitizer, batch 16 alone: batch 1 runs the same code with fewer rows.
batches="1 16"
if sanitized; then batches=16; fi
for batch in $batches; do
  STRATA_RPC_STATS=1 "$strata" bench -m "$model" -t 1 --batches $batch -p 16 -n 8 -r 1 \
    --probe-mib 8 --rpc "$A,$B" --device RPC0,CPU,RPC1 >"$tmp/bench.txt" 2>"$tmp/stats.txt" ||
    { cat "$tmp/stats.txt"; fail "bench at batch $batch"; }
  check "batch $batch" 3 1 1 "$tmp/stats.txt"
  grep -q "GRAPH_RECOMPUTE" "$tmp/stats.txt" || fail "graphs are never re-run by id"

  # Reads one by one (GET_TENSOR): each stage reads one tensor per step, so a step is still
  # one round trip.
  STRATA_RPC_STATS=1 STRATA_RPC_NO_BATCHED_GET=1 "$strata" bench --probe-mib 8 -m "$model" -t 1 \
    --batches $batch -p 16 -n 8 -r 1 --rpc "$A,$B" --device RPC0,CPU,RPC1 \
    >"$tmp/bench.txt" 2>"$tmp/stats.txt" || { cat "$tmp/stats.txt"; fail "unbatched reads"; }
  check "batch $batch, unbatched reads" 3 1 1 "$tmp/stats.txt"
  grep -q "GET_TENSOR " "$tmp/stats.txt" || fail "STRATA_RPC_NO_BATCHED_GET=1 still sends GET_TENSORS"

  # Without the optional commands (an old client): more messages, the same outputs.
  STRATA_RPC_STATS=1 STRATA_RPC_HIDE_CAPS=0xf "$strata" bench --probe-mib 8 -m "$model" -t 1 \
    --batches $batch -p 16 -n 8 -r 1 --rpc "$A,$B" --device RPC0,CPU,RPC1 \
    >"$tmp/bench.txt" 2>"$tmp/stats.txt" || { cat "$tmp/stats.txt"; fail "no optional commands"; }
  check "batch $batch, no optional commands" 4 1 1 "$tmp/stats.txt"
  if grep -q "GRAPH_RECOMPUTE\|SET_TENSORS\|GET_TENSORS" "$tmp/stats.txt"; then
    fail "a hidden capability was used"
  fi

  # Hand-off between two workers: the first stage's two one-way messages (its inputs, then its
  # computation with the send) and no read; the last stage's three and one round trip. The one
  # SYNCHRONIZE of the first stage at the end of the run is all it ever waits for.
  STRATA_RPC_STATS=1 "$strata" bench -m "$model" -t 1 --batches $batch -p 16 -n 8 -r 1 \
    --probe-mib 8 --rpc "$A,$B" --device RPC0,RPC1 >"$tmp/bench.txt" 2>"$tmp/handoff.txt" ||
    { cat "$tmp/handoff.txt"; fail "hand-off at batch $batch"; }
  check_ep "batch $batch, hand-off" "$A" 2.2 0.2 0 "$tmp/handoff.txt"
  check_ep "batch $batch, hand-off" "$B" 3 1 1 "$tmp/handoff.txt"
  grep -q "HANDOFF_COMPUTE" "$tmp/handoff.txt" || fail "no HANDOFF_COMPUTE at batch $batch"
  grep -q "hand-off: .* sends to the next stage's worker" "$tmp/handoff.txt" ||
    { cat "$tmp/handoff.txt"; fail "no hand-off counted at batch $batch"; }
  got=$(received "$tmp/handoff.txt" "$A")
  [ "${got:-99}" -le 8 ] || { cat "$tmp/handoff.txt"; fail "$got bytes per step came back from the first stage"; }
  # The same split through this host: three messages and one round trip at each worker, and
  # the hidden state comes back from the first.
  STRATA_RPC_STATS=1 STRATA_RPC_HANDOFF=0 "$strata" bench -m "$model" -t 1 --batches $batch \
    --probe-mib 8 -p 16 -n 8 -r 1 --rpc "$A,$B" --device RPC0,RPC1 >"$tmp/bench.txt" 2>"$tmp/star.txt" ||
    { cat "$tmp/star.txt"; fail "STRATA_RPC_HANDOFF=0 at batch $batch"; }
  check "batch $batch, through this host" 3 1 1 "$tmp/star.txt"
  grep -q "HANDOFF_" "$tmp/star.txt" && fail "STRATA_RPC_HANDOFF=0 still hands off"
  echo "batch $batch: bytes per step back from the first stage: $got with hand-off, $(received "$tmp/star.txt" "$A") without"
done
echo "ok"
