#!/usr/bin/env bash
# The server under load, as the closing notes report it: the load client at several
# concurrencies against a local server and against the model split over two local workers.
#   bench/serve_load.sh STRATA MODEL [CONCURRENCIES] [PROMPT_TOKENS] [MAX_TOKENS]
# SERVE_FLAGS adds flags to the local server (e.g. --no-mmap). Needs curl.
# Binds 127.0.0.1 only; stops everything it starts.
set -eu
strata=$1
model=$2
concurrencies=${3:-"1 8 32"}
prompt=${4:-128}
gen=${5:-256}
slots=32
ctx=$(( slots * (prompt + gen + 8) ))
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
wait_port() { for _ in $(seq 1 600); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; return 1; }

run_load() {  # LABEL PORT
  for c in $concurrencies; do
    n=$(( c < 4 ? 4 : c * 2 ))
    echo "== $1, C=$c ($n requests, $prompt-token prompts, $gen generated)"
    "$strata" bench serve --url "http://127.0.0.1:$2" -c "$c" -n "$n" --prompt-tokens "$prompt" \
      --max-tokens "$gen" --json "$tmp/$1-$c.json" | sed 's/^/  /'
  done
}

port=$(free_port)
"$strata" serve -m "$model" -np $slots -c $ctx -t 2 ${SERVE_FLAGS:-} --port "$port" >"$tmp/serve.log" 2>&1 &
pids+=($!)
wait_http "$port"
run_load local "$port"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

w1=$(free_port); w2=$(free_port)
"$strata" worker -t 1 --port "$w1" >"$tmp/w1.log" 2>&1 & pids+=($!)
"$strata" worker -t 1 --port "$w2" >"$tmp/w2.log" 2>&1 & pids+=($!)
wait_port "$w1"; wait_port "$w2"
port=$(free_port)
"$strata" serve -m "$model" -np $slots -c $ctx -t 1 --rpc "127.0.0.1:$w1,127.0.0.1:$w2" \
  --device RPC0,RPC1 --port "$port" >"$tmp/serve-split.log" 2>&1 &
pids+=($!)
wait_http "$port"
run_load split "$port"
