#!/usr/bin/env bash
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# Runs each libFuzzer target for SECONDS (default 60); the targets are the rows of
# scripts/fuzz_targets.txt (default all of them). They are built by CMake in the clang
# AddressSanitizer + UBSan build (STRATA_FUZZ_BUILD, default build-asan; configured here when
# missing), from the library objects the sanitizer tests use; STRATA_FUZZ_NO_BUILD=1 (ctest)
# runs what is built. A target NAME may have a seed_NAME function below that fills its corpus
# and an args_NAME one that prints extra libFuzzer flags. Corpora are seeded at run time
# (STRATA_SHARED_DIR, default ../shared, for templates and models), never from files kept in
# the repo. Exits 77 (skipped) when clang or libFuzzer is not installed; 1 when a target finds
# a crash.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(awk '/^[a-z]/ {print $1}' scripts/fuzz_targets.txt)
build=${STRATA_FUZZ_BUILD:-build-asan}
cxx=${STRATA_FUZZ_CXX:-clang++}
shared=${STRATA_SHARED_DIR:-../shared}
out="$build/fuzz"
mkdir -p "$out"

if [ "${STRATA_FUZZ_NO_BUILD:-0}" != 1 ]; then
  if ! command -v "$cxx" >/dev/null; then
    echo "fuzz: $cxx not found, skipping (apt-get install clang libclang-rt-dev)"
    exit 77
  fi
  probe="$out/probe.cc"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
  if ! "$cxx" -fsanitize=fuzzer,address "$probe" -o "$out/probe" 2>/dev/null; then
    echo "fuzz: libFuzzer not available to $cxx, skipping (apt-get install libclang-rt-dev)"
    exit 77
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DSTRATA_SANITIZE=address >/dev/null
  fi
  cmake --build "$build" -j "${STRATA_JOBS:-$(nproc)}" --target strata \
    "${targets[@]/#/fuzz_}"
fi
for t in "${targets[@]}"; do
  if [ ! -x "$build/fuzz_$t" ]; then
    echo "fuzz: $build/fuzz_$t is not built (a target of scripts/fuzz_targets.txt?)"
    exit 77
  fi
done

# protocol: a HELLO request.
seed_protocol() {
  printf '\x00\x01\x00\x00\x00\x00\x00\x00\x00' >"$1/seed-hello"
}

# A valid graph as a seed, so that the fuzzer starts past the header checks: out = a + b over
# 8 floats (layout in src/graph/serialize.h).
seed_graph() {
  python3 - "$1/seed-add" <<'PY'
import struct, sys
def tensor(off):
    return struct.pack('<QQII4q4Q', 1, off, 0, 0, 8, 1, 1, 1, 4, 32, 32, 32)
node = struct.pack('<I5iI4i4f', 3, 0, 1, -1, -1, -1, 2, 0, 0, 0, 0, 0, 0, 0, 0)
data = struct.pack('<4I', 0x31524753, 1, 3, 1) + tensor(0) + tensor(32) + tensor(64) + node
open(sys.argv[1], 'wb').write(data)
PY
}

# Seeds for the jinja target: each real template alone (rendered with the target's own chat),
# and followed by a NUL and a context from tests/reference/chat_conversations.json; a small
# template when the shared folder is absent.
seed_jinja() {
  local corpus=$1
  printf '{%% for m in messages %%}{{ m.role }}: {{ m.content | trim }}\n{%% endfor %%}' \
    >"$corpus/seed-minimal"
  python3 - "$corpus" "$shared/templates" tests/reference/chat_conversations.json <<'PY' || true
import glob, json, os, sys
corpus, templates, conversations = sys.argv[1:4]
conv = json.load(open(conversations, encoding="utf-8"))
contexts = [
    {"messages": conv["conversations"]["tool_call"], "tools": conv["tools"],
     "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"},
    {"messages": conv["conversations"]["reasoning_content"], "add_generation_prompt": False,
     "enable_thinking": False, "bos_token": "", "eos_token": "<|im_end|>"},
]
for path in sorted(glob.glob(os.path.join(templates, "*.jinja"))):
    text = open(path, "rb").read()
    name = os.path.basename(path)
    open(os.path.join(corpus, "seed-" + name), "wb").write(text)
    for i, ctx in enumerate(contexts):
        data = text + b"\0" + json.dumps(ctx, ensure_ascii=False).encode()
        open(os.path.join(corpus, "seed-%s-%d" % (name, i)), "wb").write(data)
PY
}

# Jinja's words and tokens, so that mutations form tags, filters and tests.
args_jinja() {
  dict_jinja >"$out/jinja.dict"
  echo -dict="$out/jinja.dict" -max_len=65536
}
dict_jinja() {
  local w
  for w in '{{' '}}' '{%' '%}' '{#' '#}' '{%-' '-%}' '{{-' '-}}' for in endfor if elif else \
    endif set endset macro endmacro call endcall filter endfilter raw endraw generation \
    endgeneration break continue namespace loop.index loop.first loop.last messages tools \
    content role tool_calls not and or is defined none true false tojson trim items join \
    length map select reject selectattr rejectattr default string replace split startswith \
    endswith upper lower title format strftime_now raise_exception range dict '|' '~' '**' \
    '//' '[::-1]' '.get(' ; do
    printf '"%s"\n' "$w"
  done
}

# Seeds for the seqstate target: states of 3 tokens for its fingerprint (a 2-layer llama, one kv
# head of 32 values) with each KV dtype; the target writes the checksums itself.
seed_seqstate() {
  python3 - "$1" <<'PY'
import struct, sys
for name, kv, row in (("f16", 1, 64), ("f32", 0, 128), ("q8_0", 8, 34)):
    n = 3
    payload = struct.pack("<3I", 5, 6, 7) + bytes(range(256)) * ((2 * 2 * n * row) // 256 + 1)
    payload = payload[:4 * n + 2 * 2 * n * row]
    h = b"STRATAKV" + struct.pack("<IIQQ", 2, 136, len(payload), 0)
    h += b"llama".ljust(32, b"\0") + struct.pack("<7I", 2, 64, 2, 1, 32, 32, 300)
    h += struct.pack("<IQQQII", kv, 1, 2, 3, n, 0) + struct.pack("<Q", 0)
    open(sys.argv[1] + "/seed-" + name, "wb").write(h + payload)
PY
}

# Seeds for the request target: a selector byte (the endpoint, or 6: raw connection bytes; the
# high bit: with a vocabulary), then a request each endpoint accepts.
seed_request() {
  local c=$1
  printf '\x00{"prompt": "hi", "max_tokens": 4, "temperature": 0.5, "stop": ["x"], "n": 2, "logprobs": 2, "logit_bias": {"15": -1}, "seed": 7}' >"$c/seed-completions"
  printf '\x80{"prompt": "abc", "logit_bias": [["ab", -1], [5, false], ["c", 2]], "n_probs": 2}' >"$c/seed-vocab"
  printf '\x01{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "1"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "auto", "stream": true, "stream_options": {"include_usage": true}}' >"$c/seed-chat"
  printf '\x02{"prompt": [1, 2, "three"], "n_predict": 8, "top_k": 5, "repeat_penalty": 1.1, "n_probs": 3, "samplers": ["top_k", "temperature"], "t_max_predict_ms": 100}' >"$c/seed-native"
  printf '\x80{"prompt": "a: b", "dry_multiplier": 0.8, "dry_sequence_breakers": [":", "ab"], "dry_penalty_last_n": -1, "xtc_probability": 0.5, "typical_p": 0.9, "top_n_sigma": 1.0, "mirostat": 2, "min_keep": 2, "dynatemp_range": 0.5, "samplers": "edkypmxt"}' >"$c/seed-samplers"
  printf '\x03{"input_prefix": "def f(", "input_suffix": "):", "input_extra": [{"filename": "a.py", "text": "x = 1"}], "prompt": "y"}' >"$c/seed-infill"
  printf '\x04{"model": "m", "max_tokens": 8, "system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "1"}]}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "stop_sequences": ["x"]}' >"$c/seed-messages"
  printf '\x05{"model": "m", "instructions": "be brief", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "1"}], "tools": [{"type": "function", "name": "f", "parameters": {}}], "max_output_tokens": 8}' >"$c/seed-responses"
  printf '\x02{"prompt": "x", "grammar": "root ::= (\\"a\\" | [b-d]+)* ws\\nws ::= [ \\t]{0,3}"}' >"$c/seed-grammar"
  printf '\x01{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": 3}, "b": {"enum": [1, "x", null]}}, "required": ["a"], "$defs": {"t": {"type": "string", "minLength": 1}}}}}}' >"$c/seed-schema"
  printf '\x01{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"c": {"type": "string", "pattern": "^[A-Z]{2}(-\\\\d+|x?)$"}}, "required": ["c"]}}}], "tool_choice": "required", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "string", "pattern": "a[^\\\\s@]*\\\\.(?:com|org){1,2}"}}}}' >"$c/seed-pattern"
  printf '\x06POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n' >"$c/seed-stream"
}

# The request fields the parsers read, so that mutations form them.
args_request() {
  dict_request >"$out/request.dict"
  echo -dict="$out/request.dict" -max_len=8192
}
dict_request() {
  grep -oh '"[a-z_$]\{2,32\}"' src/server/api.cc src/server/chat_request.cc \
    src/server/compat_anthropic.cc src/server/compat_responses.cc \
    src/server/json_schema_grammar.cc | sort -u
  # Pieces of patterns (regular expressions), which no field name spells.
  printf '%s\n' '"(?:"' '"[^"' '"\\\\d"' '"\\\\u00e9"' '"{2,3}"' '"(?="' '"\\\\b"' '"|"'
}

# gguf: small synthetic models of each architecture and a few block layouts, whole, and the
# real files of the shared folder cut where their tensor data begins (header, metadata and
# tensor infos are what the target parses; whole files would only slow the fuzzer).
seed_gguf() {
  local corpus=$1 arch dtype f
  for arch in llama qwen2 qwen3 gemma2 gemma3 phi3; do
    for dtype in f32 q8_0 q4_K; do
      "$build/strata" gguf gen -o "$corpus/seed-$arch-$dtype.gguf" --arch "$arch" \
        --dtype "$dtype" --n-embd 32 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 64 \
        --n-vocab 260 --n-ctx 64 >/dev/null 2>&1 || rm -f "$corpus/seed-$arch-$dtype.gguf"
    done
  done
  for f in "$shared"/models/*.gguf "$shared"/models/*/*.gguf; do
    [ -f "$f" ] || continue
    python3 - "$f" "$corpus/seed-$(basename "$f")" <<'PY' || true
import struct, sys
b = open(sys.argv[1], "rb").read()
pos, align = 24, 32
n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def value(t):
    global pos
    if t == 8:
        pos += 8 + struct.unpack_from("<Q", b, pos)[0]
    elif t == 9:
        et, n = struct.unpack_from("<IQ", b, pos)
        pos += 12
        for _ in range(n) if et == 8 else ():
            value(8)
        pos += 0 if et == 8 else n * size[et]
    else:
        v = b[pos:pos + size[t]]
        pos += size[t]
        return int.from_bytes(v, "little")
for _ in range(n_kv):
    n = struct.unpack_from("<Q", b, pos)[0]
    key = b[pos + 8:pos + 8 + n]
    pos += 8 + n
    t = struct.unpack_from("<I", b, pos)[0]
    pos += 4
    v = value(t)
    if key == b"general.alignment":
        align = v
for _ in range(n_tensors):
    pos += 8 + struct.unpack_from("<Q", b, pos)[0]
    pos += 4 + 8 * struct.unpack_from("<I", b, pos)[0] + 4 + 8
open(sys.argv[2], "wb").write(b[:(pos + align - 1) // align * align])
PY
  done
}
args_gguf() {
  echo -max_len=131072
}

status=0
for t in "${targets[@]}"; do
  corpus="$out/corpus-$t"
  mkdir -p "$corpus"
  ! declare -F "seed_$t" >/dev/null || "seed_$t" "$corpus"
  extra_args=()
  ! declare -F "args_$t" >/dev/null || read -r -a extra_args < <("args_$t")
  bin=fuzz_$t
  echo "fuzz: running $bin for ${seconds}s"
  if ! "$build/$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$bin-" "${extra_args[@]}" "$corpus" 2>"$out/$bin.log"; then
    tail -n 40 "$out/$bin.log"
    echo "fuzz: $bin FAILED (log: $out/$bin.log)"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "$out/$bin.log" | head -3 || true
    echo "fuzz: $bin ok"
  fi
done
exit $status
