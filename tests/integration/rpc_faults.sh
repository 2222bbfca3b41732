#!/usr/bin/env bash
# A worker that dies or stalls in the middle of a generation fails the run within the timeout,
# with an error that names the worker; the client neither hangs nor crashes, and once the
# worker is back the next run succeeds. So it goes when two workers hand the hidden state to
# each other, whichever of them fails. Over TCP, then over UCX (its TCP and its shared memory)
# when this strata has it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
ref=$(greedy local -m "$model" -n 32 -t 1)

# long_run FAULT: starts a long generation against a fresh worker, applies FAULT (a signal) to
# the worker once text is streaming, and checks how the run ends.
# With a third argument (0 or 1), the run is split over two fresh workers that hand the hidden
# state off, and the fault goes to the worker of that stage.
long_run() {
  local fault=$1 timeout_ms=$2 stage=${3:-}
  local rpc devices victim victim_addr
  if [ -z "$stage" ]; then
    start_worker victim
    victim=$last_pid victim_addr=$addr rpc=$addr devices=CPU,RPC0
  else
    start_worker first
    local first=$last_pid first_addr=$addr
    start_worker second
    rpc=$first_addr,$addr devices=RPC0,RPC1
    if [ "$stage" = 0 ]; then victim=$first victim_addr=$first_addr; else victim=$last_pid victim_addr=$addr; fi
  fi
  # Emptied before the run starts: the previous run's text would pass for this one's.
  : >"$tmp/long.txt"
  STRATA_RPC_TIMEOUT_MS=$timeout_ms "$strata" run -m "$model" -p "Once upon a time" -n 3000 \
    -c 4096 --temp 0 --ignore-eos -t 1 --rpc "$rpc" --device "$devices" \
    >"$tmp/long.txt" 2>"$tmp/long.err" &
  local run=$! i
  for i in $(seq 1 400); do
    [ "$(wc -c <"$tmp/long.txt")" -gt 40 ] && break
    kill -0 $run 2>/dev/null || break
    sleep 0.05
  done
  [ "$(wc -c <"$tmp/long.txt")" -gt 40 ] || { cat "$tmp/long.err"; fail "generation did not start"; }
  local t0=$(date +%s%N)
  kill "-$fault" "$victim"
  # The run must end by itself: wait for it, with a bound well past the timeout.
  local limit=$(( (timeout_ms + 15000) / 50 ))
  for i in $(seq 1 $limit); do
    kill -0 $run 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 $run 2>/dev/null; then
    kill -9 $run
    fail "the run hangs after SIG$fault of its worker"
  fi
  local rc=0
  wait $run || rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -ne 0 ] || fail "the run succeeded although its worker got SIG$fault"
  [ $rc -lt 128 ] || { cat "$tmp/long.err"; fail "the run died of signal $((rc - 128))"; }
  grep -q "$victim_addr" "$tmp/long.err" || { cat "$tmp/long.err"; fail "the error does not name $victim_addr"; }
  echo "SIG$fault${stage:+ of stage $stage (hand-off)}: failed after $ms ms: $(tail -n 1 "$tmp/long.err")"
  [ $ms -le $((timeout_ms + 10000)) ] || fail "SIG$fault took $ms ms to fail (timeout $timeout_ms)"
  kill -CONT "$victim" 2>/dev/null || true
  kill -9 "$victim" 2>/dev/null || true
  wait "$victim" 2>/dev/null || true
  port=${victim_addr##*:}
}

faults() {
  long_run KILL 30000
  # Restart on the same port: the next run succeeds, with the output of one machine.
  start_worker again --port "$port"
  got=$(greedy again -m "$model" -n 32 -t 1 --rpc "$addr" --device CPU,RPC0)
  [ "$got" = "$ref" ] || fail "the run after the restart differs"
  echo "restarted worker on port $port: same output"

  # A stalled worker (stopped, its socket open) fails the run after STRATA_RPC_TIMEOUT_MS.
  long_run STOP 2000
  grep -q "within 2000 ms" "$tmp/long.err" || { cat "$tmp/long.err"; fail "the stall is not reported as a timeout"; }

  # Two workers that hand the hidden state to each other: the sender (stage 0) or the receiver
  # (stage 1) killed or stopped mid-run fails the run in time, naming that worker.
  local stage
  for stage in 0 1; do
    long_run KILL 30000 $stage
    long_run STOP 2000 $stage
  done
  grep -q "STRATA_RPC_TIMEOUT_MS\|stalled" "$tmp/long.err" || { cat "$tmp/long.err"; fail "the stall is not reported as one"; }

  # A worker that is not there is an error naming it, not a hang.
  local dead=${worker_scheme:+ucx:}127.0.0.1:$port
  if "$strata" run -m "$model" -p x -n 1 --rpc "$dead" 2>"$tmp/err.txt"; then
    fail "a run against a dead worker succeeded"
  fi
  grep -q "$dead" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "connect error without the endpoint"; }
}

echo "== tcp"
faults
if have_ucx; then
  # Under a sanitizer, UCX over TCP only: its shared memory runs the same code of ours.
  overs="tcp sm"
  if sanitized; then overs=tcp; fi
  for over in $overs; do
    echo "== ucx over $over"
    use_ucx $over
    faults
  done
fi
echo "ok"
