#!/usr/bin/env bash
# A model split over real workers gives the bytes of one machine: two and three workers (which
# hand the hidden state to each other, or pass it through this host with STRATA_RPC_HANDOFF=0),
# the CPU and one worker (either order), the CPU between two workers, over the Unix seqpacket
# transport, and over UCX (its TCP and its shared memory) when this strata has it; the
# synthetic model, and stories260K when present. Embeddings too.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
start_worker a
A=$addr
start_worker b
B=$addr
start_worker u --unix "$tmp/u.sock"
U=$addr
# UCX workers: one over UCX's TCP, one over its shared memory (each run sets the client's
# UCX_TLS to match).
XT="" XS=""
if have_ucx; then
  use_ucx tcp
  start_worker xt
  XT=$addr
  use_ucx sm
  start_worker xs
  XS=$addr
  use_tcp
fi

# Architectures whose layers need the newer ops (rope tables, GELU gates, sliding windows,
# soft-caps): the tables and the ops cross the wire as the plain llama ones do.
"$strata" gguf gen -o "$tmp/phi3.gguf" --arch phi3 --n-embd 256 --n-layer 4 --n-ff 512 \
  --n-vocab 512 --dtype q8_0 --rope-scaling longrope --rope-orig-ctx 16 >/dev/null
"$strata" gguf gen -o "$tmp/gemma2.gguf" --arch gemma2 --n-embd 256 --n-layer 4 --n-ff 512 \
  --n-vocab 512 --dtype q4_K --swa 6 --attn-softcap 2 --final-softcap 5 >/dev/null
models=("$model" "$tmp/phi3.gguf" "$tmp/gemma2.gguf")
[ -f "$shared/models/stories260K.gguf" ] && models+=("$shared/models/stories260K.gguf")
# Under a sanitizer, the first model alone: the others take the same client, worker and
# transport code (their ops are the unit tests' cases).
if sanitized; then models=("$model"); fi
for m in "${models[@]}"; do
  ref=$(greedy local -m "$m" -n 48 -t 1)
  for config in "--rpc $A,$B --device RPC0,RPC1" "--rpc $A --device CPU,RPC0" \
    "--rpc $A --device RPC0,CPU --tensor-split 3,1" "--rpc $U,$B --device RPC0,CPU,RPC1" \
    "--rpc $A,$B" "--rpc $A,$U,$B --device RPC0,RPC1,RPC2" \
    "--rpc $B,$A --device CPU,RPC0,RPC1"; do
    # shellcheck disable=SC2086
    got=$(greedy split -m "$m" -n 48 -t 1 $config)
    [ "$got" = "$ref" ] || { diff "$tmp/local.txt" "$tmp/split.txt" || true;
      fail "$(basename "$m") with $config differs from one machine"; }
    echo "same output: $(basename "$m") $config"
  done
  # Sampling on the last stage's device (a worker, or the CPU after one): the same greedy and
  # seeded bytes as sampling on this machine's CPU.
  seeded=(--temp 0.9 --seed 5 --top-k 0 --top-p 0.95 --repeat-penalty 1.2)
  seeded_ref=$(greedy local -m "$m" -n 48 -t 1 "${seeded[@]}")
  for config in "--rpc $A,$B --device RPC0,RPC1" "--rpc $A --device RPC0,CPU --tensor-split 3,1" \
    "--rpc $A,$U,$B --device RPC0,RPC1,RPC2"; do
    # shellcheck disable=SC2086
    got=$(greedy split -m "$m" -n 48 -t 1 $config --backend-sampling)
    [ "$got" = "$ref" ] || fail "$(basename "$m") greedy with $config --backend-sampling differs"
    # shellcheck disable=SC2086
    got=$(greedy split -m "$m" -n 48 -t 1 $config --backend-sampling "${seeded[@]}")
    [ "$got" = "$seeded_ref" ] ||
      fail "$(basename "$m") seeded with $config --backend-sampling differs"
    echo "same output, backend sampling: $(basename "$m") $config"
  done
  # The hidden state through this host rather than handed off, with and without backend sampling.
  for config in "--rpc $A,$B --device RPC0,RPC1" "--rpc $A,$U,$B --device RPC0,RPC1,RPC2"; do
    # shellcheck disable=SC2086
    got=$(STRATA_RPC_HANDOFF=0 greedy split -m "$m" -n 48 -t 1 $config)
    [ "$got" = "$ref" ] || fail "$(basename "$m") with $config, STRATA_RPC_HANDOFF=0 differs"
    # shellcheck disable=SC2086
    got=$(STRATA_RPC_HANDOFF=0 greedy split -m "$m" -n 48 -t 1 $config --backend-sampling)
    [ "$got" = "$ref" ] || fail "$(basename "$m") with $config, STRATA_RPC_HANDOFF=0 --backend-sampling differs"
  done
  echo "same output without hand-off: $(basename "$m")"
  if [ -n "$XT" ]; then
    got=$(UCX_TLS=tcp greedy split -m "$m" -n 48 -t 1 --rpc "$XT,$B" --device RPC0,CPU,RPC1)
    [ "$got" = "$ref" ] || fail "$(basename "$m") over ucx (tcp) differs from one machine"
    echo "same output: $(basename "$m") over ucx (tcp) and tcp"
    got=$(UCX_TLS=sm,tcp UCX_MM_ERROR_HANDLING=y greedy split -m "$m" -n 48 -t 1 \
      --rpc "ucx://${XS#ucx:}" --device CPU,RPC0)
    [ "$got" = "$ref" ] || fail "$(basename "$m") over ucx (shared memory) differs from one machine"
    echo "same output: $(basename "$m") over ucx (shared memory)"
    # Two UCX workers hand the hidden state to each other over UCX (the one transport they share).
    got=$(UCX_TLS=tcp STRATA_RPC_STATS=1 greedy split -m "$m" -n 48 -t 1 --rpc "$XT,$XS" \
      --device RPC0,RPC1)
    [ "$got" = "$ref" ] || fail "$(basename "$m") handed off between ucx workers differs"
    grep -q "HANDOFF_COMPUTE" "$tmp/split.err" || { cat "$tmp/split.err"; fail "no hand-off between ucx workers"; }
    echo "same output: $(basename "$m") handed off between ucx workers"
  fi
  # The hidden state moved with a synchronisation per stage gives the same bytes too.
  got=$(STRATA_RPC_NO_ASYNC_COPY=1 greedy split -m "$m" -n 48 -t 1 --rpc "$A,$B" --device CPU,RPC0,RPC1)
  [ "$got" = "$ref" ] || fail "$(basename "$m") with STRATA_RPC_NO_ASYNC_COPY=1 differs"
  got=$(STRATA_RPC_NO_ASYNC_COPY=1 greedy split -m "$m" -n 48 -t 1 --rpc "$A,$U,$B" --device RPC0,RPC1,RPC2)
  [ "$got" = "$ref" ] || fail "$(basename "$m") with STRATA_RPC_NO_ASYNC_COPY=1 over three workers differs"
done

# Embeddings over workers: the same bytes as on this machine (the last stage, a worker or the
# CPU after one, ends at the output norm).
embed() {
  "$strata" embed -m "$model" -p "$(printf 'Once upon a time\nthere was')" --pooling mean \
    -t 1 "$@" --embd-output-format raw -o "$tmp/emb.bin" 2>"$tmp/emb.err" ||
    { cat "$tmp/emb.err"; fail "strata embed $* failed"; }
  md5sum <"$tmp/emb.bin" | cut -d' ' -f1
}
emb_ref=$(embed)
for config in "--rpc $A,$B --device RPC0,RPC1" "--rpc $A --device CPU,RPC0" \
  "--rpc $A --device RPC0,CPU --tensor-split 3,1"; do
  # shellcheck disable=SC2086
  [ "$(embed $config)" = "$emb_ref" ] || fail "embeddings with $config differ from one machine"
  echo "same embeddings: $config"
done

# Bad device lists and a split that does not fit are refused with what is wrong.
if "$strata" run -m "$model" -p x -n 1 --rpc "$A" --device CPU,RPC7 2>"$tmp/err.txt"; then
  fail "--device RPC7 accepted"
fi
grep -q "unknown device 'RPC7'" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "--device error"; }
start_worker small --mem 1000000
if "$strata" run -m "$model" -p x -n 1 --rpc "$addr" --device CPU,RPC0 -ts 1,1 2>"$tmp/err.txt"; then
  fail "a worker with 1 MB took half of the model"
fi
# By default the layers follow free memory: the small worker gets none, and the run is local.
got=$(greedy small -m "$model" -n 48 -t 1 --rpc "$addr" --device CPU,RPC0)
[ "$got" = "$(greedy local -m "$model" -n 48 -t 1)" ] || fail "split by free memory"
grep -q "does not fit" "$tmp/err.txt" &&
  grep -qE "^  RPC0\[$addr\] +2-4, output .*<- does not fit" "$tmp/err.txt" ||
  { cat "$tmp/err.txt"; fail "the fit error does not say what each device needs"; }
echo "ok"
