#!/usr/bin/env bash
# Logits and embeddings of synthetic f32 models of every architecture and rope variant against the numpy
# reference (tests/reference/llama_ref.py: its own GGUF parser and maths in float64, sharing
# no code with strata). The reference rounds K and V to f16 as strata's cache stores them, so
# what remains is float32 accumulation: 1e-3 of the largest logit is ample for these shapes
# (measured: ~1e-5 .. 1e-4), while a wrong rope, norm or mask is off by 1e-1 or more.
# Mixtures of experts add a discrete step, the choice of experts: the reference fails unless
# every token's last chosen expert beats the first one left out by 1e-3 (--min-margin), ten
# times the error the logits show (which has gone through every layer), so that both pick the
# same experts and the same 1e-3 bound holds. A seed whose routing is closer than that is a seed
# to change, not a pass (the seeds here: smallest margins 1e-2, 2e-2 and, gpt-oss, 6.6e-3).
# gpt-oss runs as released (YaRN factor 32 over 4096 positions, rope base 150000) with a window
# of 8, so that its even layers slide within the 48 positions; leaving out any of its parts in
# the reference (sinks, windows, a bias, the clamped SwiGLU, YaRN) moves the logits by 1.7 or
# more.
set -eu
strata=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  echo "SKIP: python3-numpy is absent"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name | gguf gen flags
cases=(
  "llama|--arch llama"
  "llama-head-dim|--arch llama --head-dim 48"
  "qwen2|--arch qwen2"
  "qwen3|--arch qwen3 --head-dim 48"
  "llama-partial-rotary|--arch llama --n-rot 16"
  "llama31-rope-freqs|--arch llama --rope-freqs --rope-freq-base 500000 --rope-orig-ctx 64"
  "qwen2-yarn|--arch qwen2 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 64"
  "llama-linear|--arch llama --rope-scaling linear --rope-factor 2"
  "phi3|--arch phi3"
  "phi3-longrope|--arch phi3 --rope-scaling longrope --rope-orig-ctx 16 --rope-attn-factor 1.2"
  "gemma2|--arch gemma2 --n-layer 3 --swa 3 --attn-softcap 1 --final-softcap 3"
  "gemma3|--arch gemma3 --n-layer 7 --swa 3 --rope-scaling linear --rope-factor 8"
  "qwen3moe|--arch qwen3moe --head-dim 48 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --seed 6"
  "mixtral|--arch llama --n-expert 4 --n-expert-used 2 --seed 6"
  "gpt-oss|--arch gpt-oss --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --swa 8 --seed 9"
)
# 48 positions: enough for the rope variants to move the logits by O(1) (measured: a model
# read without its scaling is 0.4 .. 2.7 off), far beyond the tolerance.
ids=$(seq -s ' ' 5 5 240)
# Embeddings (strata embed): the final hidden state after the output norm, pooled, against the
# reference's; each case takes the next pooling.
poolings=(none mean cls last)
fail=0
i=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  flags=${c#*|}
  m=$tmp/$name.gguf
  # shellcheck disable=SC2086
  "$strata" gguf gen -o "$m" --seed 5 --n-layer 2 $flags --n-embd 128 --n-head 4 --n-head-kv 2 \
    --n-ff 256 --n-vocab 300 --dtype f32 >/dev/null
  "$strata" logits -m "$m" --ids "$ids" -o "$tmp/s.bin" -t 2 2>/dev/null
  /usr/bin/python3 "$here/../reference/llama_ref.py" "$m" --ids "$ids" --f16-kv --logits "$tmp/r.bin" \
    --min-margin 1e-3 2>"$tmp/margin" || { cat "$tmp/margin"; fail=1; continue; }
  /usr/bin/python3 - "$name" "$tmp/s.bin" "$tmp/r.bin" <<'PY' || fail=1
import sys, numpy as np
def read(p):
    b = open(p, "rb").read()
    n, v = np.frombuffer(b[:8], dtype="<u4")
    return np.frombuffer(b[8:], dtype="<f4").reshape(n, v)
a, b = read(sys.argv[2]), read(sys.argv[3])
d, scale = np.abs(a - b).max(), np.abs(b).max()
print("%-16s max |strata - reference| = %.2e of %.2f" % (sys.argv[1], d, scale))
sys.exit(0 if a.shape == b.shape and d <= 1e-3 * scale else 1)
PY
  pool=${poolings[$((i % 4))]}
  i=$((i + 1))
  "$strata" embed -m "$m" --ids "$ids" --pooling "$pool" --embd-normalize -1 \
    --embd-output-format raw -o "$tmp/se.bin" -t 2 2>/dev/null
  /usr/bin/python3 "$here/../reference/llama_ref.py" "$m" --ids "$ids" --f16-kv \
    --embd "$tmp/re.bin" --pooling "$pool" 2>/dev/null || { fail=1; continue; }
  /usr/bin/python3 - "$name" "$pool" "$tmp/se.bin" "$tmp/re.bin" <<'PY' || fail=1
import sys, numpy as np
a, b = np.fromfile(sys.argv[3], "<f4"), np.fromfile(sys.argv[4], "<f4")
d, scale = (np.abs(a - b).max(), np.abs(b).max()) if a.shape == b.shape else (np.inf, 0)
print("%-16s embeddings (%s pooling) max |strata - reference| = %.2e of %.2f"
      % (sys.argv[1], sys.argv[2], d, scale))
sys.exit(0 if a.shape == b.shape and d <= 1e-3 * scale else 1)
PY
done
[ $fail = 0 ] || { echo "FAIL: logits or embeddings differ from the numpy reference"; exit 1; }
echo ok
