#!/usr/bin/env bash
# Speculative decoding through `strata run`: with a draft model (the target's weights in f16,
# which agrees with its q8_0 target on most tokens; a smaller model of other weights, which
# agrees on almost none) or with n-grams of the text, the text is byte-identical to decoding
# without a draft, greedy and seeded with penalties, on the CPU and over a worker. Each run
# must show drafts checked (its "speculative:" line), and the runs together both accepted and
# refused drafted tokens, so that both ways out of a check ran. A draft model of another
# vocabulary, an unknown --spec-type and draft-simple without a model are refused by name.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=rpc_common.bash
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"

shape=(--n-embd 512 --n-layer 4 --n-head 8 --n-head-kv 2 --n-ff 1024 --n-vocab 512)
"$strata" gguf gen -o "$tmp/target.gguf" "${shape[@]}" --dtype q8_0 --seed 4 >/dev/null
"$strata" gguf gen -o "$tmp/same.gguf" "${shape[@]}" --dtype f16 --seed 4 >/dev/null
"$strata" gguf gen -o "$tmp/small.gguf" --n-embd 128 --n-layer 1 --n-head 4 --n-head-kv 2 \
  --n-ff 256 --n-vocab 512 --dtype q8_0 --seed 5 >/dev/null
"$strata" gguf gen -o "$tmp/other.gguf" --n-embd 128 --n-layer 1 --n-head 4 --n-head-kv 2 \
  --n-ff 256 --n-vocab 260 --dtype q8_0 --seed 5 >/dev/null

accepted_total=0
refused_total=0
# gen NAME SAMPLING plain|spec [RUN OPTIONS...]: the text's md5 in $text; with spec, the
# drafts' counts are checked and added up.
gen() {
  local name=$1 sampling=$2 kind=$3
  shift 3
  # shellcheck disable=SC2086
  text=$("$strata" run -m "$tmp/target.gguf" -p "Hello world, once more" -n 64 --ignore-eos \
    -t 2 $sampling "$@" 2>"$tmp/err" | md5sum | cut -c1-8) || {
    cat "$tmp/err"
    fail "$name: strata run failed"
  }
  local line
  line=$(grep "^speculative:" "$tmp/err" || true)
  if [ "$kind" = spec ]; then
    [ -n "$line" ] || fail "$name: no speculative line"
    local drafted accepted
    drafted=$(echo "$line" | sed -n 's/.* \([0-9]*\) tokens drafted.*/\1/p')
    accepted=$(echo "$line" | sed -n 's/.* \([0-9]*\) accepted.*/\1/p')
    [ "${drafted:-0}" -gt 0 ] || fail "$name: nothing was drafted ($line)"
    accepted_total=$((accepted_total + accepted))
    refused_total=$((refused_total + drafted - accepted))
    echo "  $name: $text ($line)"
  else
    echo "  $name: $text"
  fi
}

for sampling in "--temp 0" "--temp 0.3 --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1.3 --seed 7"; do
  echo "sampling: $sampling"
  gen plain "$sampling" plain
  want=$text
  gen "draft f16" "$sampling" spec -md "$tmp/same.gguf"
  [ "$text" = "$want" ] || fail "the f16 draft changed the text"
  gen "draft f16, 6 tokens" "$sampling" spec -md "$tmp/same.gguf" --spec-draft-n-max 6
  [ "$text" = "$want" ] || fail "the f16 draft of 6 tokens changed the text"
  gen "draft small" "$sampling" spec -md "$tmp/small.gguf" --spec-draft-n-max 4
  [ "$text" = "$want" ] || fail "the small draft changed the text"
  gen "ngram" "$sampling" spec --spec-type ngram-simple --spec-ngram-simple-size-n 1
  [ "$text" = "$want" ] || fail "n-gram drafts changed the text"
done
echo "drafted tokens: $accepted_total accepted, $refused_total refused"
[ "$accepted_total" -gt 0 ] || fail "no drafted token was ever accepted"
[ "$refused_total" -gt 0 ] || fail "no drafted token was ever refused"

# Over a worker: the target's layers split between it and the CPU, the draft on the CPU.
start_worker w
gen "plain, split" "--temp 0" plain --rpc "$addr"
want=$text
gen "draft f16, split" "--temp 0" spec --rpc "$addr" -md "$tmp/same.gguf"
[ "$text" = "$want" ] || fail "the draft changed the text of the split"

# The server: llama-server's flags, its request field and its counters. Two requests at once
# on two slots, greedy and seeded, streamed and not: the same texts with n-gram drafts on.
content() {  # BODY: the completion's text (streamed or not), as JSON
  curl -sf "$url/completion" -d "$1" | python3 -c '
import json, sys
t = sys.stdin.read()
if t.startswith("data"):
    print(json.dumps("".join(json.loads(l[6:]).get("content", "")
                             for l in t.splitlines() if l.startswith("data: {"))))
else:
    print(json.dumps(json.loads(t)["content"]))'
}
bodies=('{"prompt": "Hello world, once more", "n_predict": 48, "temperature": 0, "ignore_eos": true}'
  '{"prompt": "Hello world, once more", "n_predict": 48, "temperature": 0.3, "top_k": 0, "top_p": 1, "min_p": 0, "repeat_penalty": 1.3, "seed": 7, "ignore_eos": true, "stream": true}'
  '{"prompt": "Once upon a time", "n_predict": 48, "temperature": 0, "ignore_eos": true, "speculative.n_max": 5}')
serve_texts() {  # OPTIONS...: the texts of the bodies, served two at a time, in $tmp/texts
  start_server -m "$tmp/target.gguf" -np 2 -t 2 --metrics "$@"
  local i pids=()
  for i in "${!bodies[@]}"; do
    content "${bodies[$i]}" >"$tmp/text.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"  # not the server's
  for i in "${!bodies[@]}"; do cat "$tmp/text.$i"; done >"$tmp/texts"
}
serve_texts
stop_server
cp "$tmp/texts" "$tmp/texts.plain"
# served_same WHAT COUNTER OPTIONS...: the texts served with OPTIONS are the plain ones, and the
# llamacpp:spec_decode_num_COUNTER_total counter is above 0.
served_same() {
  local what=$1 counter=$2 n
  shift 2
  serve_texts "$@"
  curl -sf "$url/metrics" >"$tmp/metrics"
  stop_server
  cmp -s "$tmp/texts" "$tmp/texts.plain" || {
    diff "$tmp/texts.plain" "$tmp/texts" | head
    fail "the server's texts changed with $what"
  }
  grep "^llamacpp:spec_decode" "$tmp/metrics"
  n=$(sed -n "s/^llamacpp:spec_decode_num_${counter}_total \\([0-9]*\\).*/\\1/p" "$tmp/metrics")
  [ "${n:-0}" -gt 0 ] || fail "with $what the server's $counter counter is 0"
  echo "server: the same $(wc -l <"$tmp/texts") texts with $what"
}
served_same "n-gram drafts" draft_tokens --spec-type ngram-simple --spec-ngram-simple-size-n 1 \
  --spec-draft-n-max 4
# -md alone means draft-simple, as in llama-server.
served_same "a draft model" accepted_tokens -md "$tmp/same.gguf" --spec-draft-n-max 3

# Refusals, by name.
refused() {  # WHAT PATTERN RUN OPTIONS...
  local what=$1 pattern=$2
  shift 2
  if "$strata" run -m "$tmp/target.gguf" -p "Hello" -n 4 "$@" >/dev/null 2>"$tmp/err"; then
    fail "$what was not refused"
  fi
  grep -q -- "$pattern" "$tmp/err" || {
    cat "$tmp/err"
    fail "$what: the message does not say '$pattern'"
  }
  echo "refused: $what: $(tail -n 1 "$tmp/err")"
}
refused "a draft of another vocabulary" "not the same vocabulary" -md "$tmp/other.gguf"
refused "an unknown type" "'draft-eagle3'" --spec-type draft-eagle3
refused "draft-simple without a model" "needs a draft model" --spec-type draft-simple
refused "a draft of 300 tokens" "300" --spec-type ngram-simple --spec-draft-n-max 300
if "$strata" serve -m "$tmp/target.gguf" --port 0 -md "$tmp/other.gguf" >/dev/null 2>"$tmp/err"; then
  fail "the server took a draft model of another vocabulary"
fi
grep -q "not the same vocabulary" "$tmp/err" || {
  cat "$tmp/err"
  fail "the server's refusal of the draft model does not say why"
}
echo "refused: serve: $(tail -n 1 "$tmp/err")"
echo "PASS"
