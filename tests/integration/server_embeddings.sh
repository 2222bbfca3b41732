#!/usr/bin/env bash
# `strata serve --embedding`: /v1/embeddings, /embeddings and /embedding give the vectors
# `strata embed` gives (the same pooling and normalisation, any batch of inputs, requests at
# once), in floats and in OpenAI's base64; the official OpenAI Node SDK reads them; pooling none
# gives every token's vector on /embeddings and a 400 on /v1/embeddings; bad inputs are refused
# by name; generation is a 501.
set -eu
strata=$1
source "$(cd "$(dirname "$0")" && pwd)/node_sdk.bash"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  echo "SKIP: python3-numpy is absent"
  exit 77
fi

model=$tmp/model.gguf
"$strata" gguf gen -o "$model" --n-embd 256 --n-layer 2 --n-ff 512 --n-vocab 512 --dtype q8_0 \
  --seed 7 >/dev/null

# start NAME ARGS...: `strata serve ARGS` in the background; sets $url to its address once it
# says it listens (the read blocks until that line or the process's end). Its stdout stays open
# on fd 3 until stop_last.
start() {
  local name=$1
  shift
  mkfifo "$tmp/$name.fifo"
  "$strata" serve "$@" >"$tmp/$name.fifo" 2>"$tmp/$name.err" &
  pids+=($!)
  local line=""
  exec 3<"$tmp/$name.fifo"
  IFS= read -r line <&3 || true
  url=$(grep -o 'http://127.0.0.1:[0-9]*' <<<"$line" | head -1)
  [ -n "$url" ] || { cat "$tmp/$name.err"; fail "$name did not start"; }
}
stop_last() {
  kill "${pids[-1]}" 2>/dev/null || true
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'
  exec 3<&-
}
post() {  # PATH BODY: the response body; the status code to $tmp/code
  curl -s -o "$tmp/body" -w '%{http_code}' "$url$1" -H 'Content-Type: application/json' \
    -d "$2" >"$tmp/code"
  cat "$tmp/body"
}

texts=("Hello world" "the second text" "a third, longer text than the others")
printf '%s\n' "${texts[@]}" | head -c -1 >"$tmp/texts.txt"
"$strata" embed -m "$model" -p "$(cat "$tmp/texts.txt")" --pooling mean -t 2 \
  --embd-output-format array >"$tmp/cli.json" 2>/dev/null

start mean -m "$model" --embedding --pooling mean -np 2 -c 256 --port 0
inputs=$(printf '%s\n' "${texts[@]}" | /usr/bin/python3 -c 'import json, sys; print(json.dumps([l.rstrip("\n") for l in sys.stdin]))')
post /v1/embeddings "{\"input\": $inputs, \"model\": \"m\"}" >"$tmp/v1.json"
post /v1/embeddings "{\"input\": $inputs, \"encoding_format\": \"base64\"}" >"$tmp/b64.json"
post /embeddings "{\"input\": $inputs}" >"$tmp/native.json"
post /embedding "{\"content\": \"${texts[1]}\"}" >"$tmp/one.json"
# Two requests at once (each into a file of its own): each gets what it gets alone.
curl -s -o "$tmp/c0.json" "$url/v1/embeddings" -d "{\"input\": \"${texts[0]}\"}" &
c0=$!
curl -s -o "$tmp/c1.json" "$url/v1/embeddings" \
  -d "{\"input\": [\"${texts[2]}\", \"${texts[1]}\"]}" &
c1=$!
wait "$c0" "$c1"
/usr/bin/python3 - "$tmp" <<'PY' || fail "served embeddings differ from strata embed's"
import base64, json, sys
import numpy as np
t = sys.argv[1]
cli = np.array(json.load(open(t + "/cli.json")), dtype=np.float64)
def load(name): return json.load(open(t + "/" + name))
v1 = load("v1.json")
assert v1["object"] == "list" and v1["model"] == "m" and v1["usage"]["prompt_tokens"] > 0, v1.keys()
got = np.array([d["embedding"] for d in v1["data"]])
assert [d["index"] for d in v1["data"]] == [0, 1, 2]
def close(a, b, what):
    d = np.abs(np.asarray(a, dtype=np.float64) - b).max()
    assert d < 1e-6, "%s: %g" % (what, d)
close(got, cli, "/v1/embeddings")
b64 = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in load("b64.json")["data"]])
close(b64, cli, "base64")
native = load("native.json")
close(np.array([x["embedding"][0] for x in native]), cli, "/embeddings")
close(load("one.json")[0]["embedding"][0], cli[1], "/embedding")
close(load("c0.json")["data"][0]["embedding"], cli[0], "concurrent request 0")
c1 = load("c1.json")["data"]
close(c1[0]["embedding"], cli[2], "concurrent request 1, input 0")
close(c1[1]["embedding"], cli[1], "concurrent request 1, input 1")
print("served = strata embed: /v1/embeddings (float, base64), /embeddings, /embedding, at once")
PY

# Refusals by name; generation is not served.
for bad in '{"input": []}|holds no input' '{"input": [100000]}|outside the vocabulary' \
  '{"input": "x", "encoding_format": "hex"}|encoding_format' '{"input": 5}|must be a string' \
  '{"input": "x", "embd_normalize": "2"}|embd_normalize' \
  '{"input": "x", "embd_normalize": 18446744073709551615}|embd_normalize'; do
  body=${bad%%|*}
  want=${bad#*|}
  post /v1/embeddings "$body" >/dev/null
  [ "$(cat "$tmp/code")" = 400 ] && grep -q "$want" "$tmp/body" ||
    fail "$body: $(cat "$tmp/code") $(cat "$tmp/body")"
done
long=$(/usr/bin/python3 -c 'print(" ".join(["word"] * 400))')
post /v1/embeddings "{\"input\": \"$long\"}" >/dev/null
[ "$(cat "$tmp/code")" = 400 ] && grep -q "the context holds 256" "$tmp/body" ||
  fail "an input longer than the context: $(cat "$tmp/body")"
post /v1/completions '{"prompt": "x"}' >/dev/null
[ "$(cat "$tmp/code")" = 501 ] || fail "generation on an embeddings server: $(cat "$tmp/code")"
curl -sf "$url/health" | grep -q ok || fail "/health"

# The official OpenAI Node SDK (it asks for base64 and decodes it).
sdk=$(dirname "$strata")/node-sdk
if ! why=$(node_sdks "$sdk" openai); then
  echo "SKIP: $why"
else
    cat >"$sdk/embeddings_check.mjs" <<'JS'
import OpenAI from "openai";
import { readFileSync } from "fs";
const client = new OpenAI({ baseURL: process.env.BASE + "/v1", apiKey: "none" });
const texts = readFileSync(process.env.TEXTS, "utf8").split("\n");
const want = JSON.parse(readFileSync(process.env.CLI, "utf8"));
const r = await client.embeddings.create({ model: "m", input: texts });
if (r.data.length !== texts.length) throw new Error("data length " + r.data.length);
for (const d of r.data) {
  const w = want[d.index];
  if (d.embedding.length !== w.length) throw new Error("length " + d.embedding.length);
  for (let i = 0; i < w.length; i++) {
    if (Math.abs(d.embedding[i] - w[i]) > 1e-6) throw new Error(`input ${d.index} value ${i}`);
  }
}
console.log("openai sdk: embeddings.create of", texts.length, "texts = strata embed");
JS
    (cd "$sdk" && BASE=$url TEXTS=$tmp/texts.txt CLI=$tmp/cli.json node embeddings_check.mjs) ||
      fail "OpenAI Node SDK"
fi
stop_last

# Pooling none: every token's vector on /embeddings (unnormalised), none on /v1/embeddings.
start none -m "$model" --embedding --pooling none --port 0
n=$("$strata" tokenize -m "$model" -p "${texts[2]}" | wc -w)
post /embeddings "{\"input\": \"${texts[2]}\"}" >"$tmp/none.json"
"$strata" embed -m "$model" -p "${texts[2]}" --pooling none --embd-normalize -1 \
  --embd-output-format array >"$tmp/cli_none.json" 2>/dev/null
/usr/bin/python3 - "$tmp" "$n" <<'PY' || fail "pooling none"
import json, sys
import numpy as np
t, n = sys.argv[1], int(sys.argv[2])
rows = np.array(json.load(open(t + "/none.json"))[0]["embedding"])
cli = np.array(json.load(open(t + "/cli_none.json")))
assert rows.shape == cli.shape == (n, 256), (rows.shape, cli.shape, n)
assert np.abs(rows - cli).max() < 1e-6
print("pooling none: %d token vectors = strata embed's" % n)
PY
post /v1/embeddings '{"input": "x"}' >/dev/null
[ "$(cat "$tmp/code")" = 400 ] && grep -q "pooling 'none'" "$tmp/body" ||
  fail "/v1/embeddings under pooling none: $(cat "$tmp/body")"
stop_last
# A server of generation says how to get embeddings.
start gen -m "$model" --port 0
post /v1/embeddings '{"input": "x"}' >/dev/null
[ "$(cat "$tmp/code")" = 501 ] && grep -q -- "--embedding" "$tmp/body" ||
  fail "/v1/embeddings without --embedding: $(cat "$tmp/code") $(cat "$tmp/body")"
stop_last
if "$strata" serve -m "$model" --embedding --pooling rank --port 0 2>"$tmp/rank.err" >/dev/null; then
  fail "--pooling rank accepted"
fi
grep -q "rank needs a classifier head" "$tmp/rank.err" || fail "rank: $(cat "$tmp/rank.err")"
echo ok
