#!/usr/bin/env bash
# A split over workers behind `strata proxy` (1 ms each way, 1000 Mbit/s) gives the bytes of
# the direct split and of one machine; a proxy whose target is gone fails the client with an
# error, not a hang; proxies stop cleanly on SIGTERM.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"

# start_proxy NAME TARGET [proxy options...]: sets $addr to the proxy's address.
start_proxy() {
  local name=$1 target=$2
  shift 2
  : >"$tmp/$name.log"  # as start_worker empties its log
  "$strata" proxy --to "$target" "$@" >>"$tmp/$name.log" 2>"$tmp/$name.err" &
  last_pid=$!
  worker_pids+=("$last_pid")
  if ! wait_listening "$tmp/$name.log" "$last_pid" 200 '[^ ]*'; then
    cat "$tmp/$name.err"
    kill -0 "$last_pid" 2>/dev/null && fail "proxy $name did not start listening"
    fail "proxy $name exited at start"
  fi
  addr=$listening
}

make_model
start_worker a
A=$addr
start_worker b
B=$addr
start_proxy pa "$A" --delay-ms 1 --mbit 1000
PA=$addr
pa_pid=$last_pid
start_proxy pb "$B" --delay-ms 1 --mbit 1000
PB=$addr
pb_pid=$last_pid

models=("$model")
[ -f "$shared/models/stories260K.gguf" ] && models+=("$shared/models/stories260K.gguf")
for m in "${models[@]}"; do
  ref=$(greedy local -m "$m" -n 48 -t 1)
  direct=$(greedy direct -m "$m" -n 48 -t 1 --rpc "$A,$B" --device RPC0,RPC1)
  [ "$direct" = "$ref" ] || fail "$(basename "$m"): the direct split differs from one machine"
  proxied=$(greedy proxied -m "$m" -n 48 -t 1 --rpc "$PA,$PB" --device RPC0,RPC1)
  [ "$proxied" = "$direct" ] || { diff "$tmp/direct.txt" "$tmp/proxied.txt" || true;
    fail "$(basename "$m"): the split through the proxies differs from the direct one"; }
  echo "same output through the proxies: $(basename "$m") ($proxied)"
done
# The runs went through the proxies (the workers' addresses were not given to them).
grep -q ": open" "$tmp/pa.err" || { cat "$tmp/pa.err"; fail "no connection through proxy a"; }

# A proxy whose target is gone: the client's connection is closed, and it fails by name.
start_worker c
C=$addr
c_pid=$last_pid
start_proxy pc "$C"
PC=$addr
kill "$c_pid"
wait "$c_pid" 2>/dev/null || true
rc=0
timeout 60 "$strata" run -m "$model" -p x -n 1 --rpc "$PC" --device RPC0 2>"$tmp/err.txt" || rc=$?
[ "$rc" != 0 ] || fail "a run through a proxy to a dead worker succeeded"
[ "$rc" != 124 ] || fail "a run through a proxy to a dead worker hung"
grep -q "$PC" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the error does not name the proxy"; }

# SIGTERM stops a proxy with status 0.
for pid in "$pa_pid" "$pb_pid"; do
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || fail "proxy exited with $rc on SIGTERM"
done
echo "ok"
