#!/usr/bin/env bash
# Mixtures of experts on synthetic models (qwen3moe, llama with experts: Mixtral-style, and
# gpt-oss: mxfp4 experts with biases, attention sinks, sliding windows on every other layer):
# greedy output byte-identical across thread counts, over two workers (and the CPU between
# them), and from a server with --pipeline-groups 2 under 8 concurrent requests as from one
# group answering one at a time; over two workers a decode step stays at three messages and
# one round trip per stage, at batch 1 and 8 (STRATA_RPC_STATS, read as rpc_stats.sh reads it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
for tool in curl jq; do
  command -v $tool >/dev/null || { echo "SKIP: needs $tool"; exit 77; }
done
start_worker a
A=$addr
start_worker b
B=$addr

trap 'stop_server; rpc_cleanup' EXIT

# completions DIR PARALLEL: 16 greedy completions of 24 tokens, PARALLEL at a time; the text of
# each in its own file in DIR. A failed request, or a reply without a text, fails the test, its
# reply left in DIR (a pipe from curl into jq would hide curl's status).
completions() {
  mkdir -p "$1"
  seq 0 15 | xargs -P "$2" -I{} sh -c "curl -sS -f -o '$1/{}.json' '$url/v1/completions' \
    -H 'Content-Type: application/json' \
    -d '{\"prompt\": \"story {} begins with\", \"max_tokens\": 24, \"temperature\": 0}' &&
    jq -e -r '.choices[0].text | strings' '$1/{}.json' >'$1/{}.txt' && rm '$1/{}.json'" ||
    fail "a completion into $1 failed: $(ls "$1")"
}

# per_step FILE ENDPOINT: "messages round_trips" of the endpoint's total block.
per_step() {
  awk -v ep="$2" '
    $1 == "rpc" && $3 == "total:" { inside = index($2, ep) > 0; next }
    inside && $1 == "per" { gsub(",", ""); print $5, $7; exit }' "$1"
}

"$strata" gguf gen -o "$tmp/qwen3moe.gguf" --arch qwen3moe --n-embd 256 --n-layer 4 \
  --n-ff 512 --n-expert 16 --n-expert-used 4 --n-ff-exp 128 --n-vocab 512 --dtype q8_0 \
  --seed 3 >/dev/null
"$strata" gguf gen -o "$tmp/mixtral.gguf" --arch llama --n-embd 256 --n-layer 4 --n-ff 256 \
  --n-expert 4 --n-expert-used 2 --n-vocab 512 --dtype q4_K --seed 3 >/dev/null
# A window of 16 positions: the 48 generated tokens pass it on the sliding layers.
"$strata" gguf gen -o "$tmp/gptoss.gguf" --arch gpt-oss --n-embd 256 --n-layer 4 --n-ff 256 \
  --n-expert 8 --n-expert-used 4 --n-ff-exp 128 --n-vocab 512 --dtype q8_0 --expert-dtype mxfp4 \
  --swa 16 --seed 3 >/dev/null
# Under a sanitizer, one of each: the others run the same code over other splits of the work.
# Its split has both workers and the CPU between them.
threads="2 3" micro="1 5"
splits=("--rpc $A,$B --device RPC0,RPC1" "--rpc $A,$B --device RPC0,CPU,RPC1"
  "--rpc $A --device CPU,RPC0 --tensor-split 1,3")
if sanitized; then threads=3 micro=1 splits=("${splits[1]}"); fi
for m in "$tmp/qwen3moe.gguf" "$tmp/mixtral.gguf" "$tmp/gptoss.gguf"; do
  name=$(basename "$m" .gguf)
  ref=$(greedy local -m "$m" -n 48 -t 1)
  for t in $threads; do
    [ "$(greedy threads -m "$m" -n 48 -t $t)" = "$ref" ] || fail "$name with -t $t differs from -t 1"
  done
  # Prompt micro-batches of 1 and 5 tokens instead of one of all.
  for b in $micro; do
    [ "$(greedy batch -m "$m" -n 48 -t 2 -b $b)" = "$ref" ] || fail "$name with -b $b differs"
  done
  for config in "${splits[@]}"; do
    # shellcheck disable=SC2086
    got=$(greedy split -m "$m" -n 48 -t 1 $config)
    [ "$got" = "$ref" ] || fail "$name with $config differs from one machine"
  done
  echo "same output: $name over threads, micro-batches and splits"

  for batch in 1 8; do
    STRATA_RPC_STATS=1 "$strata" bench --probe-mib 8 -m "$m" -t 1 --batches $batch -p 16 -n 8 -r 1 \
      --rpc "$A,$B" --device RPC0,CPU,RPC1 >"$tmp/bench.txt" 2>"$tmp/stats.txt" ||
      { cat "$tmp/stats.txt"; fail "$name: bench at batch $batch"; }
    for ep in "$A" "$B"; do
      line=$(per_step "$tmp/stats.txt" "$ep")
      [ -n "$line" ] || { cat "$tmp/stats.txt"; fail "$name: no per-step stats for $ep"; }
      read -r msgs trips <<<"$line"
      awk -v m="$msgs" -v t="$trips" 'BEGIN { exit !(m <= 3 && t <= 1) }' ||
        fail "$name batch $batch: $msgs messages and $trips round trips per step at $ep"
      echo "$name batch $batch $ep: $msgs messages, $trips round trips per step"
    done
  done

  start_server -m "$m" -t 1 -c 4096 -np 1
  completions "$tmp/$name-one" 1
  stop_server
  start_server -m "$m" -t 1 -c 8192 -np 8 --pipeline-groups 2 --rpc "$A,$B" --device RPC0,RPC1
  completions "$tmp/$name-groups" 8
  stop_server
  diff -r "$tmp/$name-one" "$tmp/$name-groups" ||
    fail "$name: --pipeline-groups 2 over two workers differs from one group"
  [ -s "$tmp/$name-one/0.txt" ] || fail "$name: an empty completion"
  echo "same output: $name with --pipeline-groups 2, 8 requests at a time"
done
echo "ok"
