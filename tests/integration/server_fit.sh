#!/usr/bin/env bash
# Memory that fits every pipeline group, and each group's own thread pools, against a real
# `strata serve` and `strata worker` on 127.0.0.1: four groups on a model and context that do
# not fit are refused with need and free per device (the CPU and the worker, by name);
# `--fit on` starts with the largest context that fits and says so (log, /props); the groups'
# pools are distinct threads with the asked affinity and priority; /metrics has the per-group
# series.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
server_pids=()
cleanup_all() {
  local p
  for p in "${server_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rpc_cleanup
}
trap cleanup_all EXIT

"$strata" gguf gen -o "$tmp/model.gguf" --n-layer 4 --n-ctx 65536 >/dev/null || fail "gguf gen"
model=$tmp/model.gguf
start_worker small --mem 64M
W=$addr

# start NAME ARGS...: `strata serve ARGS` in the background; sets $url and $spid once it
# listens, fails when it exits first.
start() {
  local name=$1
  shift
  : >"$tmp/$name.out"  # not by the job's redirection, which may come after the first read
  "$strata" serve "$@" >>"$tmp/$name.out" 2>"$tmp/$name.err" &
  spid=$!
  server_pids+=("$spid")
  for _ in $(seq 1 300); do
    if grep -q listening "$tmp/$name.out" 2>/dev/null; then
      url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/$name.out" | head -1)
      return 0
    fi
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmp/$name.err"
  fail "$name did not start"
}
json() {  # EXPR FILE: prints the Python expression of the JSON in FILE (j)
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[2])); print($1)" "$1" "$2"
}

big=(-m "$model" --rpc "$W" --tensor-split 1,1 -c 65536 -np 4 --pipeline-groups 4 --cpu-mem 64
  --port 0 -t 1)

echo "four groups that do not fit: refused with need and free per device"
if STRATA_RPC_STATS=1 "$strata" serve "${big[@]}" >"$tmp/refused.out" 2>"$tmp/refused.err"; then
  fail "serve started with a plan that does not fit"
fi
err=$tmp/refused.err
grep -q "does not fit on its devices with 65536 KV cells over 4 contexts" "$err" ||
  { cat "$err"; fail "no refusal naming the plan"; }
grep -q "need MiB.*free MiB" "$err" || { cat "$err"; fail "no table header"; }
grep -E "^  RPC0\[$W\] .* 64\.0 .*<- does not fit" "$err" >/dev/null ||
  { cat "$err"; fail "no row for the worker with its 64 MiB free"; }
grep -E "^  CPU .* 64\.0 .*<- does not fit" "$err" >/dev/null ||
  { cat "$err"; fail "no row for the CPU with its 64 MiB"; }
grep -q "4 x " "$err" || { cat "$err"; fail "compute buffers not counted per group"; }
# Refused before any weight was read: the worker was asked who it is and what it has, and
# nothing else (no buffer, no tensor). The same counters of the --fit run below show them.
grep -q "RPC0.* total: 2 messages" "$err" || { cat "$err"; fail "no RPC totals"; }
grep -qE "ALLOC_BUFFER|SET_TENSOR" "$err" && { cat "$err"; fail "the worker got weights"; }
cat "$err"

echo "--fit on: starts with the largest context that fits, and says what it chose"
STRATA_RPC_STATS=1 start fit "${big[@]}" --fit on --fit-target 0 --fit-ctx 1024 --props --metrics
grep -q -- "--fit: [0-9]* KV cells (asked 65536)" "$tmp/fit.out" ||
  { cat "$tmp/fit.out" "$tmp/fit.err"; fail "the summary does not say what --fit chose"; }
grep -q -- "--fit:" "$tmp/fit.err" || { cat "$tmp/fit.err"; fail "no log line for --fit"; }
curl -sf "$url/props" >"$tmp/props.json" || fail "/props"
n_ctx=$(json 'j["n_ctx"]' "$tmp/props.json")
[ "$(json 'j["pipeline_groups"]' "$tmp/props.json")" = 4 ] || fail "groups: $(cat "$tmp/props.json")"
[ "$n_ctx" -ge 1024 ] && [ "$n_ctx" -lt 65536 ] || fail "n_ctx $n_ctx after --fit"
json 'j["fit"]["note"]' "$tmp/props.json" | grep -q "KV cells (asked 65536)" ||
  fail "/props fit: $(json 'j["fit"]' "$tmp/props.json")"
echo "--fit chose n_ctx $n_ctx: $(json 'j["fit"]["note"]' "$tmp/props.json")"
for i in 1 2 3 4; do
  curl -sf "$url/completion" -d '{"prompt":"Once upon a time","n_predict":24}' \
    >"$tmp/c$i.json" &
done
wait_ok=1
for job in $(jobs -p); do
  case " ${server_pids[*]} ${worker_pids[*]} " in *" $job "*) continue ;; esac
  wait "$job" || wait_ok=0
done
[ $wait_ok = 1 ] || fail "a completion on the fitted server failed"

echo "/metrics: per-group decode steps, busy slots per decode and queue depth"
curl -sf "$url/metrics" >"$tmp/metrics.txt" || fail "/metrics"
m=$tmp/metrics.txt
for name in strata_group_decode_steps_total strata_group_busy_slots_per_decode \
  strata_group_requests_queued; do
  for g in 0 1 2 3; do
    grep -qE "^$name\{group=\"$g\"\} [0-9.e+-]+$" "$m" || { cat "$m"; fail "no $name for group $g"; }
  done
done
grep -qE '^llamacpp:n_busy_slots_per_decode [0-9.]+' "$m" || fail "no llamacpp:n_busy_slots_per_decode"
total=$(sed -n 's/^strata_decode_steps_total //p' "$m")
summed=$(sed -n 's/^strata_group_decode_steps_total{group="[0-9]*"} //p' "$m" | paste -sd+ | bc)
[ "$total" = "$summed" ] || fail "group decode steps sum to $summed, not the $total in all"
[ "$total" -gt 0 ] || fail "no decode steps counted"
sed -n 's/^strata_group_busy_slots_per_decode{group="[0-9]*"} //p' "$m" | while read -r v; do
  /usr/bin/python3 -c "import sys; v=float(sys.argv[1]); sys.exit(0 if 0 <= v <= 1 else 1)" "$v" ||
    fail "busy slots per decode $v outside [0, 1] (1 slot per group)"
done
grep -E '^strata_group_|^llamacpp:n_busy' "$m"
kill "$spid"
wait "$spid" 2>/dev/null || true
grep -qE "ALLOC_BUFFER +count [1-9]" "$tmp/fit.err" ||
  { cat "$tmp/fit.err"; fail "the RPC counters do not show the loaded server's buffers"; }

echo "thread pools: each group its own threads, pinned and prioritised as asked"
n_cpus=$(getconf _NPROCESSORS_CONF)
if [ "$n_cpus" -ge 2 ]; then
  start pools -m "$model" -c 1024 -np 2 --pipeline-groups 2 -t 2 -tb 3 -C 3 --cpu-strict 1 \
    --prio -1 --port 0
  comm_tid() {  # NAME: the thread id of the server's thread named NAME
    local t
    for t in /proc/$spid/task/*; do
      [ "$(cat "$t/comm" 2>/dev/null)" = "$1" ] && { basename "$t"; return 0; }
    done
    return 1
  }
  cpus_of() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$spid/task/$1/status"; }
  nice_of() { sed 's/.*) //' "/proc/$spid/task/$1/stat" | cut -d' ' -f17; }
  g0=$(comm_tid g0.1) || fail "no thread g0.1 (group 0's decode pool)"
  g1=$(comm_tid g1.1) || fail "no thread g1.1 (group 1's decode pool)"
  b0=$(comm_tid g0b.2) || fail "no thread g0b.2 (group 0's prompt pool, -tb 3)"
  b1=$(comm_tid g1b.2) || fail "no thread g1b.2 (group 1's prompt pool)"
  [ "$g0" != "$g1" ] && [ "$b0" != "$b1" ] || fail "groups share pool threads"
  for t in "$g0" "$g1"; do
    [ "$(cpus_of "$t")" = 1 ] || fail "decode thread $t on CPUs $(cpus_of "$t"), not 1 (strict)"
    [ "$(nice_of "$t")" = 5 ] || fail "decode thread $t nice $(nice_of "$t"), not 5 (--prio -1)"
  done
  for t in "$b0" "$b1"; do
    [ "$(cpus_of "$t")" = 0 ] || fail "prompt thread $t on CPUs $(cpus_of "$t"), not 0 (strict)"
    [ "$(nice_of "$t")" = 0 ] || fail "prompt thread $t nice $(nice_of "$t") (--prio-batch 0)"
  done
  echo "group 0: decode $g0, prompt $b0; group 1: decode $g1, prompt $b1"
  curl -sf "$url/completion" -d '{"prompt":"Once upon a time","n_predict":8}' >/dev/null ||
    fail "completion on pinned pools"
  kill "$spid"
  wait "$spid" 2>/dev/null || true
else
  echo "SKIP pinning: one CPU"
fi

echo "a range naming a CPU that does not exist is refused"
if "$strata" serve -m "$model" -Cr "0-$n_cpus" --port 0 >"$tmp/mask.out" 2>"$tmp/mask.err"; then
  fail "a range up to CPU $n_cpus was accepted"
fi
grep -q "CPU $n_cpus does not exist" "$tmp/mask.err" || { cat "$tmp/mask.err"; fail "range error"; }
echo "PASS"
