#!/usr/bin/env bash
# llama-server's own command lines, environment and curl examples (from its README) against
# `strata serve` on 127.0.0.1 over a synthetic model; HTTPS with a throw-away certificate; and
# the official OpenAI and Anthropic Node SDKs when node and the npm registry are at hand.
set -eu
strata=$1
shared=$2
source "$(cd "$(dirname "$0")" && pwd)/node_sdk.bash"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

model=$tmp/model.gguf
"$strata" gguf gen -o "$model" --n-ctx 4096 >/dev/null

# start NAME ARGS...: starts `strata serve ARGS` in the background; sets $url to its address.
start() {
  local name=$1
  shift
  : >"$tmp/$name.out"  # not by the job's redirection, which may come after the first read
  "$strata" serve "$@" >>"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 1 200); do
    if grep -q listening "$tmp/$name.out" 2>/dev/null; then
      url=$(grep -o 'https\?://127.0.0.1:[0-9]*' "$tmp/$name.out" | head -1)
      return 0
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmp/$name.err"
  fail "$name did not start"
}
stop_last() {
  kill "${pids[-1]}" 2>/dev/null || true
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'
}
json() {  # EXPR FILE: prints the Python expression of the JSON in FILE (j)
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[2])); print($1)" "$1" "$2"
}

echo "quick start: -m MODEL -c 2048"
start quick -m "$model" -c 2048 --port 0
curl -sf --request POST --url "$url/completion" --header "Content-Type: application/json" \
  --data '{"prompt": "Building a website can be done in 10 simple steps:","n_predict": 128}' \
  >"$tmp/c.json" || fail "/completion"
[ "$(json 'j["tokens_predicted"] > 0 and "timings" in j' "$tmp/c.json")" = True ] ||
  fail "/completion fields: $(cat "$tmp/c.json")"
curl -sf "$url/v1/chat/completions" -H "Content-Type: application/json" \
  -H "Authorization: Bearer no-key" -d '{
"model": "gpt-3.5-turbo",
"messages": [
{"role": "system", "content": "You are ChatGPT, an AI assistant."},
{"role": "user", "content": "Write a limerick about python exceptions"}
], "max_tokens": 16
}' >"$tmp/chat.json" || fail "/v1/chat/completions with model gpt-3.5-turbo"
[ "$(json 'j["model"]' "$tmp/chat.json")" = gpt-3.5-turbo ] || fail "model not echoed"
curl -sf "$url/chat/completions" -H "Content-Type: application/json" \
  -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}' >/dev/null ||
  fail "/chat/completions without /v1"
curl -sf "$url/tokenize" -d '{"content": "hello world", "with_pieces": true}' >"$tmp/t.json"
[ "$(json '"piece" in j["tokens"][0]' "$tmp/t.json")" = True ] || fail "/tokenize with_pieces"
stop_last

echo "a q8_0 KV cache: -ctk q8_0 -ctv q8_0 -fa on -np 2"
start q8 -m "$model" -c 2048 -ctk q8_0 -ctv q8_0 -fa on -np 2 --port 0
a=$(curl -sf "$url/completion" -d '{"prompt": "Once upon", "n_predict": 16, "temperature": 0}')
b=$(curl -sf "$url/completion" -d '{"prompt": "Once upon", "n_predict": 16, "temperature": 0}')
[ -n "$a" ] && [ "$a" != "${a/tokens_predicted/}" ] || fail "-ctk q8_0: /completion: $a"
ta=$(echo "$a" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["content"])')
tb=$(echo "$b" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["content"])')
[ -n "$ta" ] && [ "$ta" = "$tb" ] || fail "-ctk q8_0: greedy text differs: '$ta' '$tb'"
stop_last
if "$strata" serve -m "$model" -ctk q4_0 -ctv q4_0 --port 0 >"$tmp/q4.out" 2>"$tmp/q4.err"; then
  fail "-ctk q4_0 started"
fi
grep -q "f16, f32 and q8_0, not 'q4_0'" "$tmp/q4.err" || fail "-ctk q4_0: $(cat "$tmp/q4.err")"
# Heads of 40 values are not whole q8_0 blocks: refused by name, with the memory plan too.
"$strata" gguf gen -o "$tmp/hd40.gguf" --n-embd 160 --n-head 4 --n-head-kv 2 --n-layer 1 \
  --n-ff 256 --n-vocab 300 >/dev/null
for fit in off on; do
  if "$strata" serve -m "$tmp/hd40.gguf" -ctk q8_0 -ctv q8_0 --fit $fit --port 0 \
    >"$tmp/hd40.out" 2>"$tmp/hd40.err"; then
    fail "-ctk q8_0 with heads of 40 started"
  fi
  grep -q "needs head_dim a multiple of 32; this model's is 40" "$tmp/hd40.err" ||
    fail "-ctk q8_0, heads of 40, --fit $fit: $(cat "$tmp/hd40.err")"
done

echo "Qwen's long-context command line: --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 256"
rope=(--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 256)
start rope -m "$model" "${rope[@]}" --port 0
grep -q "ignored --rope\|ignored --yarn" "$tmp/rope.err" && fail "rope flags reported as ignored"
served=$(curl -sf "$url/completion" \
  -d '{"prompt": "Once upon", "n_predict": 16, "temperature": 0, "return_tokens": true}' |
  /usr/bin/python3 -c 'import json,sys; print("ids: " + " ".join(map(str, json.load(sys.stdin)["tokens"])))')
stop_last
ran=$("$strata" run -m "$model" -p "Once upon" -n 16 --temp 0 "${rope[@]}" --print-ids 2>&1 >/dev/null |
  grep "^ids:")
plain=$("$strata" run -m "$model" -p "Once upon" -n 16 --temp 0 --print-ids 2>&1 >/dev/null |
  grep "^ids:")
[ "$served" = "$ran" ] || fail "rope flags: served '$served', strata run '$ran'"
[ "$served" != "$plain" ] || fail "rope flags: the same tokens as without them"
LLAMA_ARG_ROPE_SCALE=0 LLAMA_ARG_MODEL=$model "$strata" serve --port 0 >/dev/null 2>"$tmp/r0.err" &&
  fail "LLAMA_ARG_ROPE_SCALE=0 started"
grep -q "LLAMA_ARG_ROPE_SCALE: 0 is outside" "$tmp/r0.err" || fail "LLAMA_ARG_ROPE_SCALE=0: $(cat "$tmp/r0.err")"

echo "constrained output: response_format json_schema and json_object, grammar"
start grammar -m "$model" -np 2 --port 0 --grammar 'root ::= "ok" | "fine"'
schema='{"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
  "score": {"type": "integer", "minimum": 1, "maximum": 5}}, "required": ["answer", "score"],
  "additionalProperties": false}'
for temp in 0 1.5; do
  curl -sf "$url/v1/chat/completions" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Is it?\"}],
    \"max_tokens\": 300, \"temperature\": $temp, \"seed\": 7, \"response_format\": {\"type\": \"json_schema\",
    \"json_schema\": {\"name\": \"verdict\", \"strict\": true, \"schema\": $schema}}}" >"$tmp/so.json" ||
    fail "structured output request"
  /usr/bin/python3 - "$tmp/so.json" <<'PY' || fail "structured output at temperature $temp: $(cat "$tmp/so.json")"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["choices"][0]
v = json.loads(c["message"]["content"])
assert c["finish_reason"] == "stop", c
assert set(v) == {"answer", "score"} and v["answer"] in ("yes", "no"), v
assert isinstance(v["score"], int) and 1 <= v["score"] <= 5, v
print("  structured output:", json.dumps(v))
PY
done
curl -sf "$url/completion" -d '{"prompt": "Once", "n_predict": 40, "temperature": 1, "seed": 3,
  "grammar": "root ::= (\"a\" | \"b\")+ \".\""}' >"$tmp/g.json" || fail "grammar request"
[ "$(json 'all(ch in "ab." for ch in j["content"]) and (j["stop_type"] != "eos" or j["content"].endswith("."))' "$tmp/g.json")" = True ] ||
  fail "grammar: $(cat "$tmp/g.json")"
# --grammar is the grammar of requests that bring none.
curl -sf "$url/completion" -d '{"prompt": "Once", "n_predict": 20, "temperature": 1, "seed": 5}' \
  >"$tmp/d.json" || fail "default grammar request"
[ "$(json 'j["content"] in ("ok", "fine")' "$tmp/d.json")" = True ] ||
  fail "--grammar default: $(cat "$tmp/d.json")"
code=$(curl -s -o "$tmp/bad.json" -w '%{http_code}' "$url/v1/chat/completions" -d '{"messages":
  [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema":
  {"name": "p", "schema": {"type": "string", "pattern": "(?=a)b"}}}}')
[ "$code" = 400 ] && grep -q "lookaround" "$tmp/bad.json" || fail "a pattern with lookaround: $code $(cat "$tmp/bad.json")"
# A pattern is honoured: sampled at a high temperature, the string matches it (Python's re).
curl -sf "$url/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "x"}],
  "max_tokens": 60, "temperature": 1.5, "seed": 3, "response_format": {"type": "json_schema",
  "json_schema": {"name": "p", "schema": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,4}$"}}}}' \
  >"$tmp/pat.json" || fail "a pattern request"
[ "$(json 'bool(__import__("re").fullmatch(r"[A-Z]{2}-\d{2,4}", json.loads(j["choices"][0]["message"]["content"])))' "$tmp/pat.json")" = True ] ||
  fail "a pattern's string: $(cat "$tmp/pat.json")"
stop_last

echo "the issue's command line: --temp 0.8 --seed 42 --jinja -np 4"
start issue -m "$model" --temp 0.8 --seed 42 --jinja -np 4 --port 0
a=$(curl -sf "$url/v1/completions" -d '{"prompt": "Once", "max_tokens": 12}')
b=$(curl -sf "$url/v1/completions" -d '{"prompt": "Once", "max_tokens": 12}')
ta=$(echo "$a" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
tb=$(echo "$b" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
[ "$ta" = "$tb" ] || fail "--seed 42 did not fix the sampling of requests without a seed"
stop_last

echo "docker-compose environment: LLAMA_ARG_*"
LLAMA_ARG_MODEL=$model LLAMA_ARG_CTX_SIZE=4096 LLAMA_ARG_N_PARALLEL=2 LLAMA_ARG_ENDPOINT_METRICS=1 \
  LLAMA_ARG_PORT=0 start env
curl -sf "$url/metrics" | grep -q '^llamacpp:n_decode_total' || fail "/metrics from the environment"
[ "$(curl -sf "$url/props" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_slots"])')" = 2 ] ||
  fail "LLAMA_ARG_N_PARALLEL"
stop_last

echo "GPU flags on a CPU server: -ngl 99 -fa on, reported once"
start gpu -m "$model" -ngl 99 -fa on --no-kv-offload --port 0
grep -q "ignored -fa" "$tmp/gpu.err" || fail "-fa was not reported"
[ "$(grep -c 'ignored -fa' "$tmp/gpu.err")" = 1 ] || fail "-fa reported more than once"
stop_last
if "$strata" serve -m "$model" --no-such-flag --port 0 >/dev/null 2>"$tmp/u.err"; then
  fail "an unknown flag was accepted"
fi
grep -q "unknown flag --no-such-flag" "$tmp/u.err" || fail "unknown flag message"

echo "HTTPS: --ssl-key-file / --ssl-cert-file"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 \
  -subj /CN=127.0.0.1 >/dev/null 2>&1
start tls -m "$model" --ssl-key-file "$tmp/key.pem" --ssl-cert-file "$tmp/cert.pem" --port 0 \
  --api-key secret
case $url in https://*) ;; *) fail "not https: $url" ;; esac
curl -sfk "$url/health" >/dev/null || fail "/health over TLS"
curl -sk -o /dev/null -w '%{http_code}' "$url/v1/models" | grep -q 401 || fail "no key: not 401"
curl -sfk -H "X-Api-Key: secret" "$url/v1/models" >/dev/null || fail "X-Api-Key over TLS"
stop_last

echo "OpenAI and Anthropic Node SDKs"
sdk=$(dirname "$strata")/node-sdk
if ! why=$(node_sdks "$sdk" openai @anthropic-ai/sdk); then
  echo "SKIP: $why"
else
  start sdk -m "$model" -np 2 --port 0 --api-key sk-test
  cat >"$sdk/openai_check.mjs" <<'JS'
import OpenAI from "openai";
const client = new OpenAI({ baseURL: process.env.BASE + "/v1", apiKey: "sk-test" });
const check = (c, what) => { if (!c) { console.error("FAIL: " + what); process.exit(1); } };
// Sampled at the server's defaults, with a seed: without one, a run that drew the end of text
// within the 5 tokens failed the count.
const comp = await client.completions.create({ model: "gpt-4o", prompt: "Once", max_tokens: 5,
                                                seed: 7 });
check(comp.choices[0].text.length > 0 && comp.usage.completion_tokens === 5 &&
      comp.choices[0].finish_reason === "length", "completions");
const chat = await client.chat.completions.create({
  model: "gpt-4o", messages: [{ role: "user", content: "hi" }], max_tokens: 5, temperature: 0 });
check(typeof chat.choices[0].message.content === "string", "chat");
let streamed = "";
const stream = await client.chat.completions.create({
  model: "any-name-at-all", messages: [{ role: "user", content: "hi" }], max_tokens: 5,
  temperature: 0, stream: true });
for await (const part of stream) streamed += part.choices[0]?.delta?.content ?? "";
check(streamed === chat.choices[0].message.content, "streamed chat equals the collected one");
const models = await client.models.list();
check(models.data.length === 1, "models");
// The Responses API: the SDK's output_text helper, and its streaming events.
const resp = await client.responses.create({
  model: "gpt-5", input: "hi", max_output_tokens: 5, temperature: 0 });
check(resp.output_text === chat.choices[0].message.content, "responses output_text");
let rs = "";
let final = null;
const rstream = await client.responses.create({
  model: "gpt-5", input: [{ role: "user", content: "hi" }], max_output_tokens: 5,
  temperature: 0, stream: true });
for await (const ev of rstream) {
  if (ev.type === "response.output_text.delta") rs += ev.delta;
  if (ev.type === "response.incomplete" || ev.type === "response.completed") final = ev.response;
}
check(rs === resp.output_text && final && final.usage.output_tokens === 5, "responses stream");
// Structured outputs, as the SDK sends a JSON schema.
const so = await client.chat.completions.create({
  model: "gpt-4o", messages: [{ role: "user", content: "Is it?" }], max_tokens: 300,
  temperature: 0, response_format: { type: "json_schema", json_schema: { name: "verdict",
    strict: true, schema: { type: "object", properties: { answer: { type: "string",
      enum: ["yes", "no"] } }, required: ["answer"], additionalProperties: false } } } });
const verdict = JSON.parse(so.choices[0].message.content);
check(["yes", "no"].includes(verdict.answer) && so.choices[0].finish_reason === "stop",
      "structured output: " + so.choices[0].message.content);
// llama-server's own sampler fields, sent beside the SDK's, are taken; a value out of range is
// a 400 the SDK raises, naming the field.
const dry = await client.chat.completions.create({
  model: "gpt-4o", messages: [{ role: "user", content: "hi" }], max_tokens: 5, temperature: 0.7,
  seed: 3, dry_multiplier: 0.8, dry_sequence_breakers: ["\n"], xtc_probability: 0.5,
  typical_p: 0.9, samplers: ["penalties", "dry", "top_k", "typ_p", "xtc", "temperature"] });
check(dry.usage.completion_tokens === 5, "llama-server sampler fields");
let named = "";
try {
  await client.chat.completions.create({
    model: "gpt-4o", messages: [{ role: "user", content: "hi" }], max_tokens: 5, mirostat: 7 });
} catch (e) { named = e.status === 400 ? String(e.message) : "status " + e.status; }
check(named.includes("mirostat"), "an out-of-range sampler field: " + named);
console.log("openai sdk: completions, chat, streaming, models, responses, structured output, samplers ok");
JS
  cat >"$sdk/anthropic_check.mjs" <<'JS'
import Anthropic from "@anthropic-ai/sdk";
const client = new Anthropic({ baseURL: process.env.BASE, apiKey: "sk-test" });
const check = (c, what) => { if (!c) { console.error("FAIL: " + what); process.exit(1); } };
const params = { model: "claude-sonnet-4-5", max_tokens: 6, temperature: 0, system: "brief",
                 messages: [{ role: "user", content: "hi" }] };
const msg = await client.messages.create(params);
check(msg.type === "message" && msg.content[0].type === "text", "messages.create");
check(msg.stop_reason === "max_tokens" && msg.usage.output_tokens === 6, "stop and usage");
const stream = client.messages.stream(params);
let text = "";
stream.on("text", (t) => { text += t; });
const final = await stream.finalMessage();
check(text === msg.content[0].text && final.content[0].text === text, "messages.stream");
const count = await client.messages.countTokens({ model: params.model, system: params.system,
                                                  messages: params.messages });
check(count.input_tokens === msg.usage.input_tokens, "countTokens");
let failed = false;
try { await client.messages.create({ ...params, messages: "not a list" }); }
catch (e) { failed = e.status === 400; }
check(failed, "a bad request is a 400 the SDK raises");
console.log("anthropic sdk: messages, stream, count_tokens, errors ok");
JS
  (cd "$sdk" && BASE=$url node openai_check.mjs) || fail "OpenAI Node SDK"
  (cd "$sdk" && BASE=$url node anthropic_check.mjs) || fail "Anthropic Node SDK"
  stop_last

  # Tool calls: a scripted model whose reply is a Hermes tool call, with Qwen 2.5's template.
  qwen_template=$shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja
  if [ ! -f "$qwen_template" ]; then
    echo "SKIP: tool calls through the SDKs: $qwen_template is absent"
  else
    printf '%s' '["<tool_call>", "\n{\"name\": ", "\"get_weather\", ", "\"arguments\": ",
      "{\"city\": ", "\"Paris\"}}", "\n</tool_call>"]' >"$tmp/script.json"
    "$strata" gguf gen -o "$tmp/tools.gguf" --script "$tmp/script.json" --n-embd 320 \
      --n-vocab 300 --n-layer 1 --n-ff 64 >/dev/null
    start tools -m "$tmp/tools.gguf" --chat-template-file "$qwen_template" --port 0 \
      --api-key sk-test
    cat >"$sdk/tools_check.mjs" <<'JS'
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
const check = (c, what) => { if (!c) { console.error("FAIL: " + what); process.exit(1); } };
const openai = new OpenAI({ baseURL: process.env.BASE + "/v1", apiKey: "sk-test" });
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather",
  parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const messages = [{ role: "user", content: "Weather in Paris?" }];
const r = await openai.chat.completions.create({ model: "gpt-4o", messages, tools });
const call = r.choices[0].message.tool_calls?.[0];
check(r.choices[0].finish_reason === "tool_calls" && call?.function.name === "get_weather",
      "openai: a tool call");
check(JSON.parse(call.function.arguments).city === "Paris", "openai: its arguments");
// The SDK's stream helper assembles streamed tool-call deltas into the final message.
const stream = openai.chat.completions.stream({ model: "gpt-4o", messages, tools });
const final = await stream.finalChatCompletion();
const scall = final.choices[0].message.tool_calls?.[0];
check(scall?.function.name === "get_weather" && JSON.parse(scall.function.arguments).city ===
      "Paris", "openai: streamed tool call");
// The second turn: the call and its result go back; the server renders them.
const turn2 = await openai.chat.completions.create({ model: "gpt-4o", tools, max_tokens: 4,
  messages: [...messages, r.choices[0].message,
             { role: "tool", tool_call_id: call.id, content: "sunny" }] });
check(turn2.choices.length === 1, "openai: a tool result accepted");
const anthropic = new Anthropic({ baseURL: process.env.BASE, apiKey: "sk-test" });
const m = await anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 64,
  messages: [{ role: "user", content: "Weather in Paris?" }],
  tools: [{ name: "get_weather", description: "Weather",
            input_schema: { type: "object", properties: { city: { type: "string" } } } }] });
const use = m.content.find((b) => b.type === "tool_use");
check(m.stop_reason === "tool_use" && use?.name === "get_weather" && use.input.city === "Paris",
      "anthropic: a tool_use block");
const ms = anthropic.messages.stream({ model: "claude-sonnet-4-5", max_tokens: 64,
  messages: [{ role: "user", content: "Weather in Paris?" }],
  tools: [{ name: "get_weather", input_schema: { type: "object" } }] });
const mfinal = await ms.finalMessage();
const suse = mfinal.content.find((b) => b.type === "tool_use");
check(suse?.input.city === "Paris", "anthropic: streamed tool_use input");
console.log("sdk tool calls: openai (collected, streamed, second turn), anthropic ok");
JS
    (cd "$sdk" && BASE=$url node tools_check.mjs) || fail "tool calls through the SDKs"
    stop_last

    # tool_choice required / any / a named tool: a model of random weights (which never writes
    # a call unconstrained) must call the tools, with arguments valid under their schemas.
    "$strata" gguf gen -o "$tmp/random.gguf" --n-embd 320 --n-vocab 300 --n-layer 1 \
      --n-ff 64 >/dev/null
    start forced -m "$tmp/random.gguf" --chat-template-file "$qwen_template" --port 0 \
      --api-key sk-test
    cat >"$sdk/forced_check.mjs" <<'JS'
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
const check = (c, what) => { if (!c) { console.error("FAIL: " + what); process.exit(1); } };
const openai = new OpenAI({ baseURL: process.env.BASE + "/v1", apiKey: "sk-test" });
const zone = { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET"] } },
               required: ["zone"], additionalProperties: false };
const tools = [{ type: "function", function: { name: "get_time", strict: true,
                 parameters: zone } }];
const messages = [{ role: "user", content: "Time?" }];
for (const seed of [1, 2, 3]) {
  const r = await openai.chat.completions.create({ model: "gpt-4o", messages, tools, seed,
    tool_choice: "required", parallel_tool_calls: false, temperature: 1, max_tokens: 400 });
  const call = r.choices[0].message.tool_calls?.[0];
  check(r.choices[0].finish_reason === "tool_calls" && call?.function.name === "get_time",
        "openai required: " + JSON.stringify(r.choices[0].message));
  check(["UTC", "CET"].includes(JSON.parse(call.function.arguments).zone), "openai: arguments");
  const free = await openai.chat.completions.create({ model: "gpt-4o", messages, tools, seed,
    temperature: 1, max_tokens: 40 });
  check(!free.choices[0].message.tool_calls, "auto: a random model calls nothing");
}
const anthropic = new Anthropic({ baseURL: process.env.BASE, apiKey: "sk-test" });
for (const tool_choice of [{ type: "any", disable_parallel_tool_use: true },
                           { type: "tool", name: "get_time", disable_parallel_tool_use: true }]) {
  const m = await anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 400,
    temperature: 1, messages: [{ role: "user", content: "Time?" }], tool_choice,
    tools: [{ name: "get_time", input_schema: zone }] });
  const use = m.content.find((b) => b.type === "tool_use");
  check(m.stop_reason === "tool_use" && ["UTC", "CET"].includes(use?.input.zone),
        "anthropic " + tool_choice.type + ": " + JSON.stringify(m.content));
}
console.log("forced tool calls: openai required, anthropic any and tool ok");
JS
    (cd "$sdk" && BASE=$url node forced_check.mjs) || fail "forced tool calls through the SDKs"
    stop_last
  fi
fi
echo "PASS"
