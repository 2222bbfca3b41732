#!/usr/bin/env bash
# The server soaked: a local `strata serve` on a small synthetic model, warmed up, then REQUESTS
# requests at CONCURRENCY clients, half streamed, with a share of the clients going away
# mid-request (while sending the body, after the first event, or while waiting for a plain
# answer). Passes when no request failed unexpectedly, every slot is idle at the end, the server
# is still up, and its RSS at the end is within 5% of its RSS after the warm-up.
#   bench/soak.sh STRATA [REQUESTS] [CONCURRENCY] [WARMUP]
# Environment: SOAK_DISCONNECT (share of clients that go away, default 0.1), SOAK_MAX_TOKENS
# (default 16), SOAK_PROMPT_TOKENS (default 24), SOAK_SLOTS (default 8), SOAK_RSS_CHECK=0 to
# report the RSS without judging it (short runs), SERVE_FLAGS (more flags for the server).
# Binds 127.0.0.1 only; stops everything it starts. Needs curl and python3.
set -eu
strata=$(realpath "$1")
requests=${2:-10000}
concurrency=${3:-32}
warmup=${4:-2000}
disconnect=${SOAK_DISCONNECT:-0.1}
gen=${SOAK_MAX_TOKENS:-16}
prompt=${SOAK_PROMPT_TOKENS:-24}
slots=${SOAK_SLOTS:-8}
ctx=$(( slots * (prompt + gen + 16) ))
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# True when /slots lists every slot idle; waits up to 10 s for the last cancellations.
slots_idle() {
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/slots" >"$tmp/slots.json" &&
      python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s and not any(x["is_processing"] for x in s) else 1)' \
        "$tmp/slots.json" && return 0
    sleep 0.1
  done
  return 1
}

"$strata" gguf gen -o "$tmp/soak.gguf" >/dev/null
port=$(free_port)
"$strata" serve -m "$tmp/soak.gguf" -np "$slots" -c "$ctx" -t 2 --port "$port" ${SERVE_FLAGS:-} \
  >"$tmp/serve.out" 2>"$tmp/serve.log" &
pid=$!
wait_http "$port" || { cat "$tmp/serve.log"; echo "soak: the server did not start"; exit 1; }

load() {  # SEED REQUESTS JSON
  "$strata" bench serve --url "http://127.0.0.1:$port" -c "$concurrency" -n "$2" \
    --prompt-tokens "$prompt" --max-tokens "$gen" --stream-fraction 0.5 \
    --disconnect-fraction "$disconnect" --seed "$1" --timeout 120 --json "$3" | sed 's/^/  /'
}

echo "== warm-up: $warmup requests, $concurrency clients"
load 1 "$warmup" "$tmp/warmup.json" || true
slots_idle || true
rss_warm=$(rss_kib)
echo "== soak: $requests requests, $concurrency clients, half streamed, $disconnect leave mid-way"
load 2 "$requests" "$tmp/soak.json" || true
status=0
idle=yes
slots_idle || { idle=no; status=1; }
kill -0 "$pid" 2>/dev/null || { echo "soak: the server died"; exit 1; }
rss_end=$(rss_kib)
errors=$(( $(field "$tmp/warmup.json" errors) + $(field "$tmp/soak.json" errors) ))
[ "$errors" -eq 0 ] || status=1
growth=$(python3 -c "print('%+.2f' % (100.0 * ($rss_end - $rss_warm) / $rss_warm))")
if [ "${SOAK_RSS_CHECK:-1}" != 0 ] &&
  ! python3 -c "import sys; sys.exit(0 if abs($rss_end - $rss_warm) <= 0.05 * $rss_warm else 1)"; then
  status=1
fi
echo "== result"
echo "unexpected errors   $errors"
echo "requests ok         $(field "$tmp/soak.json" requests_ok)"
echo "left mid-way        $(field "$tmp/soak.json" left)"
echo "requests/s          $(field "$tmp/soak.json" requests_s)"
echo "slots all idle      $idle"
echo "RSS after warm-up   $rss_warm KiB"
echo "RSS at the end      $rss_end KiB ($growth%)"
[ "$status" -eq 0 ] && echo "soak: ok" || { tail -n 20 "$tmp/serve.log"; echo "soak: FAILED"; }
exit $status
