#!/usr/bin/env bash
# A worker killed under load comes back without a restart of the server. A split server over two
# workers serves 200 greedy requests, 8 at a time; in the middle one worker gets SIGKILL and
# another starts on its port with the same --cache. Only the requests in flight on it fail, each
# with an error naming it; requests that arrive while it is down are refused with a 503, a
# Retry-After and a message that says so, and are sent again; /health turns 200 again; every
# other request gives the text of a run without the crash. Then a slot's lost KV is rebuilt
# from its tokens and serves its prefix again.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
command -v curl >/dev/null || { echo "SKIP: curl not found"; exit 77; }
[ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 not found"; exit 77; }
make_model

n_requests=200
crash_after=60
concurrency=8
# Under a sanitizer, half the load: the crash still lands mid-run with requests in flight.
if sanitized; then n_requests=100 crash_after=30; fi
mkdir -p "$tmp/cache_b"
start_worker a
addr_a=$addr
start_worker b --cache "$tmp/cache_b"
addr_b=$addr
pid_b=$last_pid
port_b=${addr_b##*:}

trap 'stop_server; rpc_cleanup' EXIT

# The reconnection waits are bounded by 1 s here (8 s by default) so that the test is short.
STRATA_RPC_TIMEOUT_MS=10000 STRATA_RPC_RECONNECT_MS=1000 start_server -m "$model" -t 1 \
  -c 8192 -np $concurrency --pipeline-groups 2 --rpc "$addr_a,$addr_b" --device RPC0,RPC1 \
  --metrics

# A closed-loop client: N requests, C at a time, over 25 prompts (greedy, 16 tokens; every
# fourth streamed). A 503 with Retry-After is a refusal: the request waits and is sent again. Any
# other error ends the request as failed. Writes one JSON line per request to OUT and the count
# of finished requests to PROGRESS.
cat >"$tmp/driver.py" <<'EOF'
import http.client, json, sys, threading, time
from urllib.parse import urlparse

url, n, c, out_path, progress_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
host = urlparse(url)
lock = threading.Lock()
results, next_i, done = [], [0], [0]

def once(i):
    prompt = i % 25
    stream = i % 4 == 3
    body = json.dumps({"prompt": "prompt number %d tells a story about" % prompt,
                       "max_tokens": 16, "temperature": 0, "stream": stream})
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status == 503 and r.getheader("Retry-After"):
            msg = json.loads(r.read())["error"]["message"]
            return ("refused", float(r.getheader("Retry-After")), msg)
        if r.status != 200:
            raw = r.read()
            try:
                return ("failed", r.status, json.loads(raw)["error"]["message"])
            except Exception:
                return ("failed", r.status, raw.decode("utf-8", "replace"))
        if not stream:
            return ("ok", 200, json.loads(r.read())["choices"][0]["text"])
        text, finished = "", False
        for line in r:
            line = line.decode("utf-8").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                finished = True
                break
            event = json.loads(data)
            if "error" in event:
                return ("failed", 200, event["error"]["message"])
            text += event["choices"][0]["text"]
        return ("ok", 200, text) if finished else ("failed", 200, "stream ended without [DONE]")
    except Exception as e:
        return ("failed", 0, "connection: %r" % e)
    finally:
        conn.close()

def client():
    while True:
        with lock:
            i = next_i[0]
            if i >= n:
                return
            next_i[0] += 1
        refusals, messages, t0 = 0, [], time.time()
        while True:
            outcome, code, payload = once(i)
            if outcome != "refused":
                break
            refusals += 1
            messages.append(payload)
            if refusals > 200:
                outcome, code, payload = "failed", 503, "refused 200 times: " + payload
                break
            time.sleep(code)
        rec = {"i": i, "prompt": i % 25, "outcome": outcome, "code": code,
               "text": payload if outcome == "ok" else None,
               "error": payload if outcome != "ok" else None,
               "refusals": refusals, "refusal_message": messages[0] if messages else None,
               "seconds": time.time() - t0}
        with lock:
            results.append(rec)
            done[0] += 1
            with open(progress_path + ".tmp", "w") as f:
                f.write(str(done[0]))
            import os
            os.replace(progress_path + ".tmp", progress_path)

threads = [threading.Thread(target=client) for _ in range(c)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out_path, "w") as f:
    for rec in sorted(results, key=lambda r: r["i"]):
        f.write(json.dumps(rec) + "\n")
EOF

drive() {  # NAME: runs the driver in the background
  echo 0 >"$tmp/$1.progress"
  /usr/bin/python3 "$tmp/driver.py" "$url" $n_requests $concurrency "$tmp/$1.jsonl" \
    "$tmp/$1.progress" &
  driver_pid=$!
}

health_code() { curl -s -o "$tmp/health.json" -w '%{http_code}' "$url/health" || echo 000; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# 1. The reference: the same run without a crash.
drive baseline
wait "$driver_pid" || fail "the driver failed"
/usr/bin/python3 - "$tmp/baseline.jsonl" "$tmp/baseline.json" <<'EOF' || fail "the baseline run"
import json, sys
texts = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["outcome"] == "ok", "baseline request %d: %s" % (r["i"], r["error"])
    assert r["refusals"] == 0, "baseline request %d was refused" % r["i"]
    have = texts.setdefault(r["prompt"], r["text"])
    assert have == r["text"], "prompt %d gave two texts without a crash" % r["prompt"]
json.dump(texts, open(sys.argv[2], "w"))
print("baseline: %d requests, %d prompts, all ok" % (sum(1 for _ in open(sys.argv[1])), len(texts)))
EOF

# 2. The same run; worker b is killed once $crash_after requests have finished.
drive crash
for _ in $(seq 1 1200); do
  [ "$(cat "$tmp/crash.progress")" -ge $crash_after ] && break
  kill -0 "$driver_pid" 2>/dev/null || break
  sleep 0.05
done
[ "$(cat "$tmp/crash.progress")" -ge $crash_after ] ||
  fail "the load did not reach $crash_after requests"
t_kill=$(now_ms)
kill -9 "$pid_b"
wait "$pid_b" 2>/dev/null || true
for _ in $(seq 1 400); do
  [ "$(health_code)" = 503 ] && break
  sleep 0.05
done
[ "$(health_code)" = 503 ] || fail "/health does not report the lost worker"
grep -q "$addr_b" "$tmp/health.json" || { cat "$tmp/health.json"; fail "/health does not name $addr_b"; }
# While it is down: a request is refused at once with a 503, a Retry-After and the reason.
curl -s -D "$tmp/down.headers" -o "$tmp/down.json" "$url/v1/completions" \
  -d '{"prompt": "while down", "max_tokens": 4}' || true
head -n 1 "$tmp/down.headers" | grep -q " 503" || { cat "$tmp/down.headers"; fail "no 503 while down"; }
grep -qi "^Retry-After: [1-9]" "$tmp/down.headers" || { cat "$tmp/down.headers" "$tmp/down.json"; fail "no Retry-After"; }
grep -q "reconnecting" "$tmp/down.json" && grep -q "$addr_b" "$tmp/down.json" ||
  { cat "$tmp/down.json"; fail "the refusal does not say that $addr_b is being reconnected"; }
echo "while down: $(sed 's/.*"message":"\([^"]*\)".*/\1/' "$tmp/down.json")"

start_worker b_again --port "$port_b" --cache "$tmp/cache_b"
t_restart=$(now_ms)
for _ in $(seq 1 1200); do
  [ "$(health_code)" = 200 ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server died"
  sleep 0.05
done
[ "$(health_code)" = 200 ] || { cat "$tmp/health.json"; tail "$tmp/serve.err"; fail "/health did not turn 200 again"; }
t_up=$(now_ms)
wait "$driver_pid" || fail "the driver failed"
kill -0 "$server_pid" 2>/dev/null || fail "the server is not running"
echo "killed, restarted $((t_restart - t_kill)) ms later; /health 200 again $((t_up - t_restart)) ms after the restart ($((t_up - t_kill)) ms after the kill)"

/usr/bin/python3 - "$tmp/crash.jsonl" "$tmp/baseline.json" "$addr_b" $concurrency $n_requests \
  <<'EOF' || fail "the run with the crash"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
texts, addr, c, n = json.load(open(sys.argv[2])), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
assert len(recs) == n, len(recs)
failed = [r for r in recs if r["outcome"] != "ok"]
refused = [r for r in recs if r["refusals"] > 0]
for r in failed:
    assert r["error"] and addr in r["error"], "request %d failed without naming %s: %s" % (r["i"], addr, r["error"])
for r in recs:
    if r["outcome"] == "ok":
        assert r["text"] == texts[str(r["prompt"])], "request %d (prompt %d): %r, without the crash %r" % (
            r["i"], r["prompt"], r["text"], texts[str(r["prompt"])])
for r in refused:
    assert "reconnecting" in r["refusal_message"] or "being placed again" in r["refusal_message"], r["refusal_message"]
assert 1 <= len(failed) <= c, "%d requests failed; at most %d were in flight" % (len(failed), c)
print("crash run: %d ok, %d failed (in flight on the worker), %d refused while it was down "
      "(%d refusals, then served)" % (n - len(failed), len(failed), len(refused),
                                      sum(r["refusals"] for r in refused)))
for r in failed[:3]:
    print("  failed: %s" % r["error"][:200])
EOF

# /metrics: one reconnection of b, the time it was down, and its weights found in its cache.
curl -sf "$url/metrics" >"$tmp/metrics.txt" || fail "/metrics"
metric() { sed -n "s/^$1{endpoint=\"$2\"} //p" "$tmp/metrics.txt" | head -n 1; }
[ "$(metric strata_rpc_reconnects_total "$addr_b")" = 1 ] || fail "strata_rpc_reconnects_total of b is not 1"
[ "$(metric strata_rpc_reconnects_total "$addr_a")" = 0 ] || fail "a was reconnected"
[ "$(metric strata_rpc_worker_up "$addr_b")" = 1 ] || fail "b is not up in /metrics"
attempts=$(metric strata_rpc_reconnect_attempts_total "$addr_b")
[ "$attempts" -ge 1 ] || fail "no reconnect attempt counted"
down=$(metric strata_rpc_worker_down_seconds_total "$addr_b")
cached=$(sed -n "s/^strata_rpc_weight_bytes_total{endpoint=\"$addr_b\",source=\"cache\"} //p" "$tmp/metrics.txt")
[ "$cached" -gt 0 ] || fail "the restarted worker's weights did not come from its cache"
echo "metrics: $attempts attempts, 1 reconnect, $down s down, $cached weight bytes from b's cache"
grep -q "lost" "$tmp/serve.err" && grep -q "restored after" "$tmp/serve.err" ||
  { cat "$tmp/serve.err"; fail "the log does not tell the loss and the recovery"; }
grep "restored after" "$tmp/serve.err" | sed 's/^/log: /'

# 3. A slot's KV lost with the worker is rebuilt from its tokens, and serves its prefix again.
one() {  # PROMPT_NUMBER -> "cached_tokens text" of a greedy request
  curl -sf "$url/v1/completions" -d "{\"prompt\": \"prompt number $1 tells a story about\", \"max_tokens\": 16, \"temperature\": 0}" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps([r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["text"]]))'
}
one 7 >/dev/null || fail "a request after the recovery"
pid_b=$last_pid
kill -9 "$pid_b"
wait "$pid_b" 2>/dev/null || true
for _ in $(seq 1 400); do [ "$(health_code)" = 503 ] && break; sleep 0.05; done
start_worker b_third --port "$port_b" --cache "$tmp/cache_b"
for _ in $(seq 1 1200); do [ "$(health_code)" = 200 ] && break; sleep 0.05; done
[ "$(health_code)" = 200 ] || fail "/health did not turn 200 after the second restart"
# Every slot that lost tokens is rebuilt: it holds them again, and none is lost.
/usr/bin/python3 - "$url" >"$tmp/rebuild.txt" <<'EOF2' || { cat "$tmp/rebuild.txt"; fail "rebuilding the slots"; }
import json, sys, urllib.request
url = sys.argv[1]
def get(path):
    return json.load(urllib.request.urlopen(url + path))
slots = [s for s in get("/slots") if s["n_lost"] > 0]
assert slots, "no slot reports lost tokens"
for s in slots:
    req = urllib.request.Request(url + "/slots/%d?action=rebuild" % s["id"], data=b"{}", method="POST")
    r = json.load(urllib.request.urlopen(req))
    assert r["n_rebuilt"] == s["n_lost"], (s, r)
after = {s["id"]: s for s in get("/slots")}
for s in slots:
    assert after[s["id"]]["n_cached"] == s["n_lost"] and after[s["id"]]["n_lost"] == 0, after[s["id"]]
print("rebuilt %d slots (%d tokens)" % (len(slots), sum(s["n_lost"] for s in slots)))
EOF2
cat "$tmp/rebuild.txt"
got=$(one 7)
/usr/bin/python3 -c 'import json,sys; c,t=json.loads(sys.argv[1]); want=json.load(open(sys.argv[2]))["7"]; assert c > 0, "no cached tokens"; assert t == want, (t, want)' \
  "$got" "$tmp/baseline.json" || fail "after the rebuild: $got"
echo "after the rebuild, prompt 7 reused $(echo "$got" | sed 's/^\[\([0-9]*\),.*/\1/') cached tokens and gave the text of the run without a crash"
kill -0 "$server_pid" 2>/dev/null || fail "the server is not running"
echo "ok"
