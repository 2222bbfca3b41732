#!/usr/bin/env bash
# Old and new peers work together: a client that hides optional commands and a worker that
# does not advertise them both give the output of one machine; a worker that cannot run the
# layers it would get is refused at split time. A client of another major
# version is refused with both versions named, and a worker with a token refuses clients that
# do not know it. Hand-off between workers happens only when both offer it, and then also with
# tokens (each worker proves itself to its peer with its own).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
ref=$(greedy local -m "$model" -n 32 -t 1)
start_worker new
NEW=$addr
start_worker old --hide-caps 0x7f
OLD=$addr

for hide in 0x1 0x2 0x4 0x8 0x10 0x20 0x40 0x7f; do
  got=$(STRATA_RPC_HIDE_CAPS=$hide greedy c -m "$model" -n 32 -t 1 --rpc "$NEW" --device RPC0,CPU)
  [ "$got" = "$ref" ] || fail "a client without capabilities $hide differs"
done
got=$(STRATA_RPC_STATS=1 greedy c -m "$model" -n 32 -t 1 --rpc "$OLD,$NEW" --device RPC0,CPU,RPC1)
[ "$got" = "$ref" ] || fail "an old worker beside a new one differs"
# The old worker got none of the optional commands; the new one did.
awk -v ep="$OLD" '$1 == "rpc" && $3 == "total:" { inside = index($2, ep) > 0 }
  inside && ($1 == "SET_TENSORS" || $1 == "GET_TENSORS" || $1 == "GRAPH_RECOMPUTE" ||
             $1 == "SET_TENSOR_HASH" || $1 ~ /^HANDOFF_/) { bad = 1 } END { exit bad }' "$tmp/c.err" ||
  { cat "$tmp/c.err"; fail "an optional command went to a worker that did not offer it"; }
grep -q "GRAPH_RECOMPUTE" "$tmp/c.err" || fail "the new worker was not sent GRAPH_RECOMPUTE"
echo "old/new clients and workers: same output"

# Hand-off needs both workers to offer it: an old worker (or one hiding only the bit) beside a
# new one, in either order, moves the hidden state through this host, with the same output; a
# client that hides the bit does not hand off either.
start_worker new2
NEW2=$addr
start_worker nohandoff --hide-caps 0x40
NOHANDOFF=$addr
for pair in "$OLD,$NEW" "$NEW,$OLD" "$NEW,$NOHANDOFF" "$NOHANDOFF,$NEW"; do
  got=$(STRATA_RPC_STATS=1 greedy c -m "$model" -n 32 -t 1 --rpc "$pair" --device RPC0,RPC1)
  [ "$got" = "$ref" ] || fail "$pair differs"
  grep -q "HANDOFF_" "$tmp/c.err" && { cat "$tmp/c.err"; fail "$pair: hand-off with a worker that does not offer it"; }
done
got=$(STRATA_RPC_STATS=1 STRATA_RPC_HIDE_CAPS=0x40 greedy c -m "$model" -n 32 -t 1 --rpc "$NEW,$NEW2" --device RPC0,RPC1)
[ "$got" = "$ref" ] || fail "a client without hand-off differs"
grep -q "HANDOFF_" "$tmp/c.err" && fail "a client hiding the hand-off bit handed off"
got=$(STRATA_RPC_STATS=1 greedy c -m "$model" -n 32 -t 1 --rpc "$NEW,$NEW2" --device RPC0,RPC1)
[ "$got" = "$ref" ] || fail "hand-off between two new workers differs"
grep -q "HANDOFF_COMPUTE" "$tmp/c.err" || fail "two new workers did not hand off"
echo "hand-off only between workers that both offer it: same output"

# A worker without an op or a weight dtype that its layers need (posing as an older build) is
# refused when the model is split, naming it, what it lacks and its layers, before any upload.
start_worker lacking --hide-ops swiglu --hide-dtypes f16
LACKING=$addr
if "$strata" run -m "$model" -p x -n 1 --rpc "$LACKING" --device CPU,RPC0 2>"$tmp/err.txt"; then
  fail "a worker without swiglu and f16 was given layers"
fi
grep -q "RPC0\[$LACKING\] (layers 2-4, output): cannot run op 'swiglu', weight dtype f16" \
  "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the refusal does not name the worker, op and dtype"; }
echo "missing op: $(tail -n 1 "$tmp/err.txt")"
# A worker without an op that no layer needs serves as before.
start_worker partial --hide-ops argmax
got=$(greedy c -m "$model" -n 32 -t 1 --rpc "$addr" --device RPC0,CPU)
[ "$got" = "$ref" ] || fail "a worker without an unneeded op differs"
# A worker without the sample op (an older build) is refused as the last stage under backend
# sampling, and serves as before without it or when the CPU holds the output.
start_worker nosample --hide-ops sample
NOSAMPLE=$addr
if "$strata" run -m "$model" -p x -n 1 --rpc "$NOSAMPLE" --device CPU,RPC0 --backend-sampling \
  2>"$tmp/err.txt"; then
  fail "a worker without the sample op was given the output under --backend-sampling"
fi
grep -q "RPC0\[$NOSAMPLE\] (layers 2-4, output): cannot run op 'sample'" "$tmp/err.txt" ||
  { cat "$tmp/err.txt"; fail "the refusal does not name the worker and the sample op"; }
echo "missing sample op: $(tail -n 1 "$tmp/err.txt")"
got=$(greedy c -m "$model" -n 32 -t 1 --rpc "$NOSAMPLE" --device RPC0,CPU --backend-sampling)
[ "$got" = "$ref" ] || fail "backend sampling on the CPU after a worker without the op differs"
got=$(greedy c -m "$model" -n 32 -t 1 --rpc "$NOSAMPLE" --device CPU,RPC0)
[ "$got" = "$ref" ] || fail "a worker without the sample op differs without backend sampling"

# gpt-oss's ops (attention with sinks, the clamped SwiGLU, per-expert biases) are new: a worker
# without them (posing as a build before them) is refused gpt-oss layers, naming the three ops,
# and its graph format, version 1, is what every other model's graphs still use (the run above
# with the old worker).
"$strata" gguf gen -o "$tmp/gptoss.gguf" --arch gpt-oss --n-embd 64 --n-layer 2 --n-ff 64 \
  --n-expert 4 --n-expert-used 2 --n-ff-exp 64 --n-vocab 300 --seed 3 >/dev/null
start_worker pregptoss --hide-ops attention_sink,swiglu_oai,add_id
PREGPTOSS=$addr
if "$strata" run -m "$tmp/gptoss.gguf" -p x -n 1 --rpc "$PREGPTOSS" --device CPU,RPC0 \
  2>"$tmp/err.txt"; then
  fail "a worker without gpt-oss's ops was given gpt-oss layers"
fi
grep -q "RPC0\[$PREGPTOSS\] (layers .*): cannot run op 'attention_sink', op 'swiglu_oai', op 'add_id'" \
  "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the refusal does not name the worker and gpt-oss's ops"; }
echo "missing gpt-oss ops: $(tail -n 1 "$tmp/err.txt")"
ref_oss=$(greedy local -m "$tmp/gptoss.gguf" -n 16 -t 1)
got=$(greedy c -m "$tmp/gptoss.gguf" -n 16 -t 1 --rpc "$NEW" --device CPU,RPC0)
[ "$got" = "$ref_oss" ] || fail "gpt-oss over a worker differs from one machine"

# Another major version: refused, naming both versions.
if STRATA_RPC_VERSION_MAJOR=9 "$strata" run -m "$model" -p x -n 1 --rpc "$NEW" 2>"$tmp/err.txt"; then
  fail "a client of major version 9 was served"
fi
grep -q "9\." "$tmp/err.txt" && grep -q "1\." "$tmp/err.txt" && grep -qi "version" "$tmp/err.txt" ||
  { cat "$tmp/err.txt"; fail "the version error does not name both versions"; }
echo "version mismatch: $(tail -n 1 "$tmp/err.txt")"

# Authentication.
printf 'sesame\n' >"$tmp/token"
printf 'wrong\n' >"$tmp/bad"
start_worker locked --auth-token-file "$tmp/token"
LOCKED=$addr
if "$strata" run -m "$model" -p x -n 1 --rpc "$LOCKED" 2>"$tmp/err.txt"; then
  fail "a client without the token was served"
fi
grep -q "requires a token" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "no-token error"; }
if "$strata" run -m "$model" -p x -n 1 --rpc "$LOCKED" --rpc-token-file "$tmp/bad" 2>"$tmp/err.txt"; then
  fail "a client with a wrong token was served"
fi
grep -q "$LOCKED" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the auth error does not name the worker"; }
got=$(greedy c -m "$model" -n 32 -t 1 --rpc "$LOCKED" --device RPC0,CPU --rpc-token-file "$tmp/token")
[ "$got" = "$ref" ] || fail "the authenticated run differs"
got=$(STRATA_RPC_TOKEN=sesame greedy c -m "$model" -n 32 -t 1 --rpc "$LOCKED" --device RPC0,CPU)
[ "$got" = "$ref" ] || fail "the run with STRATA_RPC_TOKEN differs"
# Two locked workers hand off to each other, each with its own copy of the token; a worker
# without the token cannot link to a locked one, and the run goes through this host instead.
start_worker locked2 --auth-token-file "$tmp/token"
LOCKED2=$addr
got=$(STRATA_RPC_STATS=1 greedy c -m "$model" -n 32 -t 1 --rpc "$LOCKED,$LOCKED2" --device RPC0,RPC1 \
  --rpc-token-file "$tmp/token")
[ "$got" = "$ref" ] || fail "hand-off between locked workers differs"
grep -q "HANDOFF_COMPUTE" "$tmp/c.err" || { cat "$tmp/c.err"; fail "locked workers did not hand off"; }
echo "hand-off between workers with a token: same output"
got=$(STRATA_RPC_STATS=1 greedy c -m "$model" -n 32 -t 1 --rpc "$NEW,$LOCKED" --device RPC0,RPC1 \
  --rpc-token-file "$tmp/token")
[ "$got" = "$ref" ] || fail "a worker without the token before a locked one differs"
grep -q "no hand-off from RPC0.* to RPC1.*same --auth-token-file" "$tmp/c.err" ||
  { cat "$tmp/c.err"; fail "the failed link is not said, with its reason"; }
grep -q "HANDOFF_COMPUTE" "$tmp/c.err" && fail "hand-off without a link"
echo "no token, no link: $(grep -o 'no hand-off from.*' "$tmp/c.err" | cut -c1-160)"
echo "ok"
