#!/usr/bin/env bash
# The engine through the command line on synthetic models: every weight dtype loads and gives
# finite logits; greedy output is byte-identical (md5) with 1 and 2 threads and with small
# micro-batches; tokenize works on a vocabulary-only file; gguf info describes a model.
set -eu
strata=$1
shared=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

finite() {  # FILE: the logits file has only finite values
  /usr/bin/python3 - "$1" <<'PY'
import struct, sys, math
b = open(sys.argv[1], "rb").read()
n, v = struct.unpack_from("<II", b)
vals = struct.unpack_from("<%df" % (n * v), b, 8)
bad = [x for x in vals if not math.isfinite(x)]
spread = max(vals) - min(vals)
print("  %d x %d logits, range %.3f" % (n, v, spread))
sys.exit(1 if bad or spread == 0 else 0)
PY
}

# Under a sanitizer (STRATA_TEST_SANITIZED=1), 8 of the 48 pairs: every dtype and every arch at
# least once (the ASan unit tests run each dtype's kernels on every path); Release runs all.
dtypes=(f32 f16 bf16 q8_0 q4_0 q4_K q5_K q6_K)
archs=(llama qwen2 qwen3 phi3 gemma2 gemma3)
for i in "${!dtypes[@]}"; do
  dtype=${dtypes[$i]}
  for j in "${!archs[@]}"; do
    arch=${archs[$j]}
    if [ "${STRATA_TEST_SANITIZED:-0}" = 1 ] && [ "$j" != $((i % ${#archs[@]})) ]; then continue; fi
    m=$tmp/$arch-$dtype.gguf
    "$strata" gguf gen -o "$m" --arch $arch --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 \
      --n-ff 512 --n-vocab 400 --dtype $dtype --seed 3 >/dev/null
    "$strata" logits -m "$m" --ids "1 20 30 40 50 60" -o "$tmp/l.bin" -t 2 2>/dev/null
    echo "$arch $dtype"
    finite "$tmp/l.bin" || { echo "FAIL: $arch $dtype logits not finite or constant"; exit 1; }
  done
done

m=$tmp/det.gguf
"$strata" gguf gen -o "$m" --n-embd 512 --n-layer 4 --n-head 8 --n-head-kv 2 --n-ff 1024 \
  --n-vocab 512 --dtype q4_K --seed 9 >/dev/null
a=$("$strata" run -m "$m" -p "Hello world, this is a test" -n 48 --temp 0 --ignore-eos -t 1 2>/dev/null | md5sum)
b=$("$strata" run -m "$m" -p "Hello world, this is a test" -n 48 --temp 0 --ignore-eos -t 2 2>/dev/null | md5sum)
c=$("$strata" run -m "$m" -p "Hello world, this is a test" -n 48 --temp 0 --ignore-eos -t 2 -b 3 2>/dev/null | md5sum)
d=$("$strata" run -m "$m" -p "Hello world, this is a test" -n 48 --temp 0 --ignore-eos -t 2 --no-mmap 2>/dev/null | md5sum)
e=$("$strata" run -m "$m" -p "Hello world, this is a test" -n 48 --temp 0 --ignore-eos -t 2 --mmap 2>/dev/null | md5sum)
echo "md5: -t 1 $a | -t 2 $b | -b 3 $c | --no-mmap $d | --mmap $e"
[ "$a" = "$b" ] && [ "$a" = "$c" ] && [ "$a" = "$d" ] && [ "$a" = "$e" ] || {
  echo "FAIL: greedy output differs across threads/batches/weight placement"; exit 1; }

# Greedy output is the same bytes at every SIMD level this CPU has (the kernels of a level give
# the AVX2 kernels' bits), on the q4_K model and on a q3_K_M mix (q3_K, q4_K, q5_K, q6_K).
m3=$tmp/q3km.gguf
"$strata" gguf gen -o "$m3" --n-embd 512 --n-layer 2 --n-head 8 --n-head-kv 2 --n-ff 1024 \
  --n-vocab 512 --mix q3_K_M --seed 4 >/dev/null
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
levels=()
has avx2 fma f16c && levels+=(avx2)
has avx2 fma f16c avx_vnni && levels+=(avxvnni)
has avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_vnni && levels+=(avx512)
if [ ${#levels[@]} -lt 2 ]; then
  echo "skipped: the same greedy bytes at every SIMD level (this CPU has ${levels[*]:-none})"
else
  for model in "$m" "$m3"; do
    want=
    for isa in "${levels[@]}"; do
      got=$(STRATA_ISA=$isa "$strata" run -m "$model" -p "Hello world" -n 32 --temp 0 --ignore-eos \
        -t 2 2>/dev/null | md5sum)
      echo "md5 at $isa ($(basename "$model")): $got"
      [ -z "$want" ] && want=$got
      [ "$got" = "$want" ] || { echo "FAIL: greedy output at $isa differs"; exit 1; }
    done
  done
fi

# Seeded sampling: same seed, same text; another seed, other text.
s1=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos 2>/dev/null | md5sum)
s2=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos -t 1 2>/dev/null | md5sum)
s3=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 6 --ignore-eos 2>/dev/null | md5sum)
[ "$s1" = "$s2" ] || { echo "FAIL: same seed gave different text"; exit 1; }
[ "$s1" != "$s3" ] || { echo "FAIL: different seeds gave the same text"; exit 1; }

# llama-cli's other samplers: seeded runs repeat, and each changes the text of the plain run.
for extra in "--typical 0.5" "--xtc-probability 1 --xtc-threshold 0.01" "--mirostat 2" \
  "--adaptive-target 0.1 --samplers top_k;top_p;min_p;temperature;adaptive_p"; do
  # shellcheck disable=SC2086
  x1=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos $extra 2>/dev/null | md5sum)
  # shellcheck disable=SC2086
  x2=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos -t 1 $extra 2>/dev/null | md5sum)
  [ "$x1" = "$x2" ] || { echo "FAIL: $extra: the same seed gave different text"; exit 1; }
  [ "$x1" != "$s1" ] || { echo "FAIL: $extra changed nothing"; exit 1; }
done
# adaptive_p listed without a target is the plain draw.
a0=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --ignore-eos \
  --samplers "top_k;top_p;min_p;temperature;adaptive_p" 2>/dev/null | md5sum)
[ "$a0" = "$s1" ] || { echo "FAIL: adaptive_p without a target changed the text"; exit 1; }
# DRY moves greedy off the runs it repeats (this model's greedy text repeats pairs).
g1=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 0 --ignore-eos 2>/dev/null | md5sum)
g2=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 0 --ignore-eos --dry-multiplier 5 --dry-allowed-length 1 2>/dev/null | md5sum)
[ "$g1" != "$g2" ] || { echo "FAIL: DRY changed nothing"; exit 1; }
# The order: min-p after a temperature of 1.5 keeps more tokens than before it.
q1=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0.3 --seed 5 --ignore-eos 2>/dev/null | md5sum)
q2=$("$strata" run -m "$m" -p "Hello" -n 40 --temp 1.5 --top-k 0 --top-p 1 --min-p 0.3 --seed 5 --ignore-eos --samplers "temperature;min_p" 2>/dev/null | md5sum)
[ "$q1" != "$q2" ] || { echo "FAIL: --samplers changed nothing"; exit 1; }
if "$strata" run -m "$m" -p hi -n 1 --samplers "top_k;bogus" 2>"$tmp/err.txt"; then
  echo "FAIL: an unknown sampler was accepted"; exit 1
fi
grep -q "'bogus' is not a sampler" "$tmp/err.txt" || {
  echo "FAIL: unclear sampler error: $(cat "$tmp/err.txt")"; exit 1; }

# llama.cpp's rope flags: a model without rope metadata, given Qwen's YaRN command line, answers
# as the same weights with that YaRN in the file; without the flags, otherwise.
for r in "" "--rope-scaling yarn --rope-factor 4 --rope-orig-ctx 16"; do
  # shellcheck disable=SC2086
  "$strata" gguf gen -o "$tmp/rope${r:+-yarn}.gguf" --arch qwen2 --n-embd 256 --n-layer 2 \
    --n-head 4 --n-head-kv 2 --n-ff 512 --n-vocab 512 --dtype q8_0 --seed 4 $r >/dev/null
done
long="one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
r1=$("$strata" run -m "$tmp/rope-yarn.gguf" -p "$long" -n 32 --temp 0 --ignore-eos --print-ids 2>&1 >/dev/null | grep "^ids:")
r2=$("$strata" run -m "$tmp/rope.gguf" -p "$long" -n 32 --temp 0 --ignore-eos --print-ids \
  --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 16 2>&1 >/dev/null | grep "^ids:")
r3=$("$strata" run -m "$tmp/rope.gguf" -p "$long" -n 32 --temp 0 --ignore-eos --print-ids 2>&1 >/dev/null | grep "^ids:")
echo "rope: yarn file $(echo "$r1" | md5sum | cut -c1-8) | flags $(echo "$r2" | md5sum | cut -c1-8) | neither $(echo "$r3" | md5sum | cut -c1-8)"
[ "$r1" = "$r2" ] || { echo "FAIL: --rope-scaling yarn differs from the file's YaRN"; exit 1; }
[ "$r1" != "$r3" ] || { echo "FAIL: YaRN changed nothing: the check shows nothing"; exit 1; }
if "$strata" run -m "$tmp/rope.gguf" -p hi -n 1 --yarn-ext-factor 0.5 2>"$tmp/err.txt"; then
  echo "FAIL: a YaRN flag on a linear rope was accepted"; exit 1
fi
grep -q "the --yarn-\* flags apply to YaRN" "$tmp/err.txt" || {
  echo "FAIL: unclear rope error: $(cat "$tmp/err.txt")"; exit 1; }

# --override-kv reaches the tokenizer: no BOS by metadata is --no-bos.
o1=$("$strata" run -m "$m" -p "Hello" -n 8 --temp 0 --print-ids \
  --override-kv tokenizer.ggml.add_bos_token=bool:false 2>&1 >/dev/null | grep "^ids:")
o2=$("$strata" run -m "$m" -p "Hello" -n 8 --temp 0 --print-ids --no-bos 2>&1 >/dev/null | grep "^ids:")
o3=$("$strata" run -m "$m" -p "Hello" -n 8 --temp 0 --print-ids 2>&1 >/dev/null | grep "^ids:")
echo "override-kv: add_bos false '$o1' | --no-bos '$o2' | neither '$o3'"
[ "$o1" = "$o2" ] || { echo "FAIL: --override-kv add_bos_token=false is not --no-bos"; exit 1; }
[ "$o1" != "$o3" ] || { echo "FAIL: BOS changed nothing: the check shows nothing"; exit 1; }

# Embeddings: each text of a batch gets the vector it gets alone, at any thread count; the
# default normalisation gives unit vectors; bad options are refused by name.
"$strata" embed -m "$m" -p "$(printf 'Hello world\nthe second text\nthird')" --pooling mean -t 2 \
  2>/dev/null >"$tmp/e3.txt"
for i in 0 1 2; do
  text=$(printf 'Hello world\nthe second text\nthird' | sed -n "$((i + 1))p")
  alone=$("$strata" embed -m "$m" -p "$text" --pooling mean -t 1 2>/dev/null | cut -d: -f2)
  together=$(sed -n "$((i + 1))p" "$tmp/e3.txt" | cut -d: -f2)
  [ -n "$alone" ] && [ "$alone" = "$together" ] || {
    echo "FAIL: text $i embedded alone differs from it among others"; exit 1; }
done
/usr/bin/python3 - "$tmp/e3.txt" <<'PY' || { echo "FAIL: embeddings are not unit vectors"; exit 1; }
import sys, math
norms = [math.sqrt(sum(float(x) ** 2 for x in l.split(":")[1].split())) for l in open(sys.argv[1])]
print("embedding norms", ["%.6f" % n for n in norms])
sys.exit(0 if len(norms) == 3 and all(abs(n - 1) < 1e-5 for n in norms) else 1)
PY
for bad in "--pooling rank" "--embd-output-format xml" "--ids 1 -p x"; do
  # shellcheck disable=SC2086
  if "$strata" embed -m "$m" -p hi $bad 2>"$tmp/err.txt" >/dev/null; then
    echo "FAIL: embed accepted $bad"; exit 1
  fi
  echo "embed $bad: $(cat "$tmp/err.txt")"
done

"$strata" gguf info "$m" >"$tmp/info.txt"
grep -q "blk.3.ffn_down.weight" "$tmp/info.txt" || { echo "FAIL: gguf info lacks tensors"; exit 1; }

vocab=$shared/tokenizer/ggml-vocab-llama-spm.gguf
if [ -f "$vocab" ]; then
  ids=$("$strata" tokenize -m "$vocab" -p "Hello world")
  echo "tokenize on a vocabulary-only file: $ids"
  [ "$ids" = "1 15043 3186" ] || { echo "FAIL: tokenize gave '$ids'"; exit 1; }
fi

# Errors are clear, never a crash.
printf 'GGUF\x03\x00\x00\x00' >"$tmp/bad.gguf"
if "$strata" run -m "$tmp/bad.gguf" -p hi 2>"$tmp/err.txt"; then echo "FAIL: bad file accepted"; exit 1; fi
grep -qi "gguf\|truncated\|past" "$tmp/err.txt" || { echo "FAIL: unclear error: $(cat "$tmp/err.txt")"; exit 1; }
echo "bad file: $(cat "$tmp/err.txt")"
echo ok
