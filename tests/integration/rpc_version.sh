#!/usr/bin/env bash
# A worker posing as another major protocol version (--protocol-major, a flag for tests) is
# refused by a client of this version, and the refusal is clear on both sides: the worker's
# log line and the client's error each name both versions.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
source "$here/rpc_common.bash"
rpc_setup "$1" "$2"
make_model
start_worker posed --protocol-major 99
if "$strata" run -m "$model" -p x -n 1 --rpc "$addr" --device RPC0 2>"$tmp/client.err"; then
  fail "a client was served by a worker of major version 99"
fi
# Both sides name the client's version (whatever it is now) and the worker's 99.
grep -Eq "version mismatch: client [0-9]+\.[0-9]+, worker 99\.[0-9]+" "$tmp/client.err" ||
  { cat "$tmp/client.err"; fail "the client's error does not name both versions"; }
grep -q "$addr" "$tmp/client.err" || { cat "$tmp/client.err"; fail "the client's error does not name the worker"; }
for i in $(seq 1 100); do
  grep -q "closed:" "$tmp/posed.log" && break
  sleep 0.05
done
grep -Eq "closed: protocol version mismatch: client [0-9]+\.[0-9]+, worker 99\.[0-9]+" "$tmp/posed.log" ||
  { cat "$tmp/posed.log"; fail "the worker's log does not name both versions"; }
echo "client: $(grep "version mismatch" "$tmp/client.err" | head -n 1)"
echo "worker: $(grep -o "closed: protocol.*" "$tmp/posed.log" | head -n 1)"

# The same worker version as the client: served.
start_worker same --protocol-major "$(sed -n 's/.*version mismatch: client \([0-9]*\)\..*/\1/p' "$tmp/client.err" | head -n 1)"
"$strata" run -m "$model" -p x -n 1 --rpc "$addr" --device RPC0 >/dev/null 2>"$tmp/same.err" ||
  { cat "$tmp/same.err"; fail "a worker of the client's own major version refused it"; }
echo "ok"
