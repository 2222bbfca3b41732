#!/usr/bin/env bash
# `strata bench` on a tiny synthetic model: the decode mode gives one ppN line per -p size (a
# single -p too) and its batch table; the batched mode gives llama-batched-bench's table, one
# row per (--pp, --tg, --pl) in that order with N_KV = B*(PP+TG); both name the instruction
# set in use; bad list items are refused, before loading, with the flag, the item and the
# limit. No timing is asserted.
set -eu
strata=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

m=$tmp/m.gguf
"$strata" gguf gen -o "$m" --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --n-ff 256 \
  --n-vocab 300 --dtype q8_0 --seed 5 >/dev/null || fail "gguf gen"

# Decode mode, two prompt sizes. The read-rate probe of this run has its default size (512 MiB);
# the other runs probe 8 MiB (--probe-mib), which takes a tenth of the time.
"$strata" bench -m "$m" -t 2 -p 8,32 --batches 1,3 -n 4 -r 1 >"$tmp/decode.txt" ||
  fail "decode mode"
cat "$tmp/decode.txt"
grep -Eq '^model: .*; 2 threads; isa [a-z0-9_]+$' "$tmp/decode.txt" ||
  fail "the header does not name the threads and the isa"
got=$(awk '$1 ~ /^pp/ && $2 > 0 && $3 == "tok/s" && $4 > 0 && $5 == "ms" { printf "%s ", $1 }' \
  "$tmp/decode.txt")
[ "$got" = "pp8 pp32 " ] || fail "prompt lines: '$got', want 'pp8 pp32 '"
got=$(awk '/^ *batch/ { t = 1; next } t && $1 != "each" && $2 > 0 { printf "%s/%d ", $1, NF }' \
  "$tmp/decode.txt")
[ "$got" = "1/3 3/2 " ] || fail "decode rows (batch/fields): '$got', want '1/3 3/2 '"
# Under batch 1, each run's fraction and the read rate probed beside it (-r 1: one run). The
# fraction of this tiny model's bound prints as 0.00 on a busy machine: its form is checked.
got=$(awk '$1 == "each" && $2 == "run:" && $3 ~ /^[0-9]+\.[0-9][0-9]$/ && $4 == "of" && $5 > 0 &&
  $6 == "GB/s" { n++ }
  END { print n + 0 }' "$tmp/decode.txt")
[ "$got" = 1 ] || fail "batch 1's per-run line: $got lines of the form 'each run: F of R GB/s'"

# --ops: after the table, a profile of the decode step per batch size. Per step of this
# 2-layer model: one attention per layer, 9 matmul passes (q/k/v, output projection, gate/up
# and down per layer, then the output matrix), 4 ropes and 4 KV writes; the shares, with the
# time outside the ops, add up to 100%.
"$strata" bench -m "$m" -t 2 -p 8 --batches 1,3 -n 4 -r 2 --ops --probe-mib 8 >"$tmp/ops.txt" ||
  fail "--ops"
cat "$tmp/ops.txt"
got=$(grep -c '^ops of a decode step at batch [13] (CPU stages, mean of 8 steps):$' "$tmp/ops.txt")
[ "$got" = 2 ] || fail "--ops: $got profile headers, want 2 (batches 1 and 3)"
got=$(awk '/^ops of a decode step at batch 1 /{ t = 1; next } /^ops of/{ t = 0 }
  t && $1 == "(outside" { share += $4 }
  t && $1 != "op" && $1 != "(outside" { calls[$1] = $4; share += $3 }
  END { printf "%s %s %s %s %.0f", calls["attention"], calls["mul_mat"], calls["rope"],
        calls["set_rows"], share }' "$tmp/ops.txt")
[ "$got" = "2.00 9.00 4.00 4.00 100" ] ||
  fail "--ops at batch 1 (attention, mul_mat, rope, set_rows calls; total share): '$got'"

# A single -p, and the instruction set lowered by STRATA_ISA.
STRATA_ISA=scalar "$strata" bench -m "$m" -t 1 -p 16 --batches 1 -n 2 -r 1 --probe-mib 8 \
  >"$tmp/one.txt" ||
  fail "a single -p"
got=$(awk '$1 ~ /^pp/ { printf "%s ", $1 }' "$tmp/one.txt")
[ "$got" = "pp16 " ] || fail "a single -p gave prompt lines '$got'"
grep -Eq '^model: .*; isa scalar$' "$tmp/one.txt" || fail "STRATA_ISA=scalar is not the isa shown"

# Batched mode: prompts of 3 x 16 tokens span several micro-batches of -b 8.
STRATA_ISA=scalar "$strata" bench -m "$m" -t 2 --pp 8,16 --tg 2,4 --pl 1,3 -b 8 \
  >"$tmp/batched.txt" || fail "batched mode"
cat "$tmp/batched.txt"
grep -Eq '^model: .*; 2 threads; isa scalar$' "$tmp/batched.txt" ||
  fail "the batched header does not name the threads and the isa"
grep -q '^n_kv_max [0-9]*, micro-batch 8 tokens (-b), one run per row$' "$tmp/batched.txt" ||
  fail "no n_kv_max / micro-batch line"
awk -F'|' '$2 ~ /PP/ { for (i = 2; i < NF; ++i) { gsub(/^ +| +$/, "", $i); printf "%s;", $i } }' \
  "$tmp/batched.txt" >"$tmp/columns"
[ "$(cat "$tmp/columns")" = "PP;TG;B;N_KV;T_PP s;S_PP t/s;T_TG s;S_TG t/s;T s;S t/s;" ] ||
  fail "columns: $(cat "$tmp/columns")"
grep -q '^|-------|--------|------|--------|----------|' "$tmp/batched.txt" ||
  fail "no separator line under the header"
# Rows: PP, TG, B in list order; N_KV = B*(PP+TG); rates positive; T = T_PP + T_TG up to the
# rounding of three printed values.
got=$(awk -F'|' '$2 ~ /^ *[0-9]+ *$/ {
    pp = $2 + 0; tg = $3 + 0; b = $4 + 0
    ok = NF == 12 && $5 + 0 == b * (pp + tg) && $7 > 0 && $9 > 0 && $11 > 0 &&
         $6 >= 0 && $8 >= 0 && ($10 - $6 - $8) ^ 2 < 0.0016 ^ 2
    printf "%d/%d/%d%s ", pp, tg, b, ok ? "" : "!"
  }' "$tmp/batched.txt")
want="8/2/1 8/2/3 8/4/1 8/4/3 16/2/1 16/2/3 16/4/1 16/4/3 "
[ "$got" = "$want" ] || fail "batched rows (PP/TG/B, ! where a column is wrong): '$got', want '$want'"
"$strata" bench -m "$m" -t 1 --pl 2 -r 2 >"$tmp/reps.txt" || fail "batched mode with -r 2"
# --ops in the batched mode: after the table, each row's generation steps by op (of both runs).
"$strata" bench -m "$m" -t 2 --pp 8 --tg 3 --pl 1,2 -r 2 --ops >"$tmp/bops.txt" ||
  fail "batched mode with --ops"
for row in "PP 8, TG 3, B 1" "PP 8, TG 3, B 2"; do
  grep -q "^ops of a generation step at $row (CPU stages, mean of 6 steps):\$" "$tmp/bops.txt" ||
    fail "batched --ops: no profile of the row $row"
done
got=$(awk '/^ops of a generation step at PP 8, TG 3, B 2 /{ t = 1; next }
  t && $1 == "attention" { print $4 }' "$tmp/bops.txt")
[ "$got" = "2.00" ] || fail "batched --ops: attention calls per step at B 2: '$got', want 2.00"
grep -q 'the least T of 2 runs per row' "$tmp/reps.txt" || fail "-r 2 is not reported"
[ "$(grep -c '^| *128 | *32 | *2 |' "$tmp/reps.txt")" = 1 ] ||
  fail "--pl alone: no single row with the default --pp 128 --tg 32"

# Bad lists: refused before the model is loaded, naming the flag, the item and the limit.
refuse() {  # EXPECTED-MESSAGE ARGS...
  local want=$1 rc=0
  shift
  "$strata" bench -m "$m" -t 1 "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] || fail "bench $* exited with $rc, want 1"
  grep -qF -- "$want" "$tmp/err" || fail "bench $*: '$(cat "$tmp/err")' lacks '$want'"
  [ ! -s "$tmp/out" ] || fail "bench $* printed before refusing: $(cat "$tmp/out")"
}
refuse "-p: '0' is not a prompt size in [1, 65536]" -p 0
refuse "-p: 'x' is not a prompt size in [1, 65536]" -p 8,x
refuse "-p: '' is not a prompt size in [1, 65536]" -p 8,
refuse "-p: '70000' is not a prompt size in [1, 65536]" -p 70000
refuse "--batches: '' is not a batch size in [1, 4096]" --batches 1,,2
refuse "--pp: '0' is not a prompt size in [1, 65536]" --pp 0
refuse "--tg: '70000' is not a generation length in [1, 65536]" --tg 70000
refuse "--pl: '5000' is not a number of sequences in [1, 4096]" --pl 1,5000
refuse "--pl: 'abc' is not a number of sequences in [1, 4096]" --pl 2,abc
refuse "needs 268468224 KV cells, more than 16777216" --pl 4096 --pp 65536 --tg 8
refuse "--probe-mib: 0 is outside [1, 65536]" --probe-mib 0
refuse "--probe-mib: 70000 is outside [1, 65536]" --probe-mib 70000
refuse "--batches, -p, -n and --probe-mib are the decode mode's" --pp 8 -p 8
refuse "--batches, -p, -n and --probe-mib are the decode mode's" --pl 2 --probe-mib 8

"$strata" bench --help >"$tmp/help.txt"
for word in "-p 128[,512" "--batches" "--pp" "--tg" "--pl" "N_KV = B*(PP+TG)" "isa" "--ops" "--probe-mib"; do
  grep -qF -- "$word" "$tmp/help.txt" || fail "--help does not mention '$word'"
done
echo "ok"
