# Shared by the rpc_*.sh integration tests (sourced; not a test itself): start and stop
# `strata worker` processes on 127.0.0.1 and compare greedy outputs.
#
# Every worker started here is stopped by the EXIT trap; waits are bounded loops on a
# condition (the worker's "listening on" line, a port that accepts), never a bare sleep.

rpc_setup() {
  strata=$1
  shared=$2
  tmp=$(mktemp -d)
  worker_pids=()
  # The transport scheme start_worker listens with: "" (TCP) or "ucx://" (UCX, whose own
  # transports the environment's UCX_TLS chooses; see use_ucx).
  worker_scheme=""
  trap rpc_cleanup EXIT
}

# use_ucx tcp|sm: later workers and runs use UCX, over its TCP or its shared memory (UCX's
# connection manager needs TCP either way; UCX_MM_ERROR_HANDLING=y lets shared memory carry
# connections that detect a dead peer). use_tcp goes back to plain TCP.
use_ucx() {
  worker_scheme="ucx://"
  case $1 in
    tcp) export UCX_TLS=tcp; unset UCX_MM_ERROR_HANDLING ;;
    sm) export UCX_TLS=sm,tcp UCX_MM_ERROR_HANDLING=y ;;
  esac
}
use_tcp() {
  worker_scheme=""
  unset UCX_TLS UCX_MM_ERROR_HANDLING
}

# have_ucx: true when this strata was built with the ucx transport (a worker listens on it).
have_ucx() {
  local log=$tmp/have_ucx.log pid i
  "$strata" worker -t 1 --host ucx://127.0.0.1 --port 0 >"$log" 2>&1 &
  pid=$!
  for i in $(seq 1 200); do
    grep -q "listening on" "$log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  grep -q "listening on" "$log" && return 0
  echo "SKIP ucx: $(tail -n 1 "$log")"
  return 1
}

# sanitized: true under a sanitizer build's ctest (STRATA_TEST_SANITIZED=1). Its processes run
# 5-10 times slower, and what it looks for (a bad access, a race) is in the code a check runs,
# not in how often: scripts that repeat a check over many models, transports or requests do
# fewer repeats then (each says which), and the Release build runs them all.
sanitized() { [ "${STRATA_TEST_SANITIZED:-0}" = 1 ]; }

rpc_cleanup() {
  local pid
  for pid in "${worker_pids[@]}"; do
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${worker_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}

fail() {
  echo "FAIL: $*"
  exit 1
}

# wait_listening FILE PID ROUNDS REGEX: sets $listening to ADDRESS of the first "listening on
# ADDRESS" line of FILE (ADDRESS matching the sed REGEX), looking every 0.05 s, at most ROUNDS
# times; fails when PID exits first or the rounds run out.
wait_listening() {
  local file=$1 pid=$2 rounds=$3 re=$4 i
  listening=""
  for i in $(seq 1 "$rounds"); do
    listening=$(sed -n "s/.*listening on \($re\).*/\1/p" "$file" | head -n 1)
    [ -n "$listening" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_server OPTIONS...: `strata serve OPTIONS --port 0` in the background ($server_pid); sets
# $url once it listens. Its output is in $tmp/serve.out and serve.err; stop_server stops it.
server_pid=""
start_server() {
  # Emptied here, not by the background job's redirection, which may come after the first read
  # below: the last server's "listening on" would give a stopped server's address.
  : >"$tmp/serve.out"
  "$strata" serve "$@" --port 0 >>"$tmp/serve.out" 2>"$tmp/serve.err" &
  server_pid=$!
  if ! wait_listening "$tmp/serve.out" "$server_pid" 1200 'http:[^ ]*'; then
    cat "$tmp/serve.err"
    kill -0 "$server_pid" 2>/dev/null && fail "the server did not start listening"
    fail "the server exited at start"
  fi
  url=$listening
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# start_worker NAME [worker options...]: starts a worker on a free port (or the --port/--unix
# given) and sets $addr to its address once it accepts connections.
start_worker() {
  local name=$1
  shift
  local log=$tmp/$name.log
  local has_port=0 a
  for a in "$@"; do
    case $a in --port | --unix) has_port=1 ;; esac
  done
  # Emptied here, not by the background job's redirection, which may come after the first read
  # below: a log left by an earlier worker of the same name would give that worker's address.
  : >"$log"
  if [ $has_port = 1 ]; then
    "$strata" worker -t 1 --host "${worker_scheme}127.0.0.1" "$@" >"$log" 2>&1 &
  else
    "$strata" worker -t 1 --host "${worker_scheme}127.0.0.1" --port 0 "$@" >"$log" 2>&1 &
  fi
  last_pid=$!
  worker_pids+=("$last_pid")
  if ! wait_listening "$log" "$last_pid" 200 '[^ ]*'; then
    cat "$log"
    kill -0 "$last_pid" 2>/dev/null && fail "worker $name did not start listening"
    fail "worker $name exited at start"
  fi
  addr=$listening
  case $addr in
    unix:* | ucx:*) ;;  # listening already (a UCX listener's port is not a plain TCP server)
    *)
      local host=${addr%:*} port=${addr##*:}
      for i in $(seq 1 200); do
        (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
        sleep 0.05
      done
      fail "worker $name at $addr does not accept connections"
      ;;
  esac
}

# greedy OUT [run options...]: greedy generation into $tmp/OUT.txt (stderr in OUT.err); prints
# the md5 of the generated text and ids.
greedy() {
  local out=$1
  shift
  if ! "$strata" run -p "Once upon a time" --temp 0 --print-ids "$@" \
    >"$tmp/$out.txt" 2>"$tmp/$out.err"; then
    cat "$tmp/$out.err"
    fail "strata run $* failed"
  fi
  { cat "$tmp/$out.txt"; sed -n 's/^ids: //p' "$tmp/$out.err"; } | md5sum | cut -d' ' -f1
}

# A synthetic llama model with tensors of more than 1 MiB (so weights go by hash).
make_model() {
  "$strata" gguf gen -o "$tmp/model.gguf" --n-embd 512 --n-layer 4 --n-ff 1536 --n-vocab 1000 \
    --dtype f16 --seed 3 >/dev/null || fail "gguf gen"
  model=$tmp/model.gguf
}
