#!/usr/bin/env bash
# `strata worker` as a process: it listens on loopback, answers a client written from the
# protocol.h layout (not from our code), requires the token when given one, survives a client
# that sends garbage, logs one line per connection, closes a silent session after
# --idle-timeout, and exits cleanly on SIGTERM.
set -eu
strata=$1
if ! command -v python3 >/dev/null; then
  echo "skipped: python3 is absent"
  exit 77
fi
tmp=$(mktemp -d)
pid=
cleanup() {
  rc=$?
  if [ "$rc" -ne 0 ]; then  # whatever step failed, the worker's own account of it
    echo "worker_process: failed (exit $rc); the worker's stdout and stderr:"
    cat "$tmp/out.txt" "$tmp/err.txt" 2>/dev/null || true
  fi
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

start_worker() {  # extra args...
  : >"$tmp/out.txt"  # not by the job's redirection: the last worker's address would be read
  "$strata" worker --port 0 -t 1 --mem 16777216 "$@" >>"$tmp/out.txt" 2>"$tmp/err.txt" &
  pid=$!
  for _ in $(seq 100); do
    grep -q "listening on" "$tmp/out.txt" 2>/dev/null && break
    sleep 0.1
  done
  addr=$(sed -n 's/^strata worker: listening on \([^ ]*\).*/\1/p' "$tmp/out.txt")
  case $addr in
    127.0.0.1:*) ;;
    *) echo "FAIL: worker did not report a loopback address: '$addr'"; cat "$tmp/err.txt"; exit 1 ;;
  esac
}

stop_worker() {
  kill -TERM "$pid"
  if ! wait "$pid"; then
    echo "FAIL: worker did not exit 0 on SIGTERM"
    exit 1
  fi
  pid=
}

client() {  # port token
  python3 - "$1" "$2" <<'PY'
import hashlib, hmac, socket, struct, sys
port, token = int(sys.argv[1]), sys.argv[2].encode()
s = socket.create_connection(("127.0.0.1", port), timeout=20)
rid = 0
def recv_exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise SystemExit("FAIL: worker closed the connection")
        b += c
    return b
def call(cmd, payload, one_way=False):
    global rid
    rid += 1
    s.sendall(struct.pack("<IBBHIIQ", 0x43505253, cmd, 2 if one_way else 0, 0, rid, 0,
                          len(payload)) + payload)
    if one_way: return None
    magic, c, flags, status, r, _, n = struct.unpack("<IBBHIIQ", recv_exact(24))
    body = recv_exact(n)
    assert magic == 0x43505253 and c == cmd and flags & 1 and r == rid, "bad response header"
    if status: raise SystemExit("FAIL: error %d: %s" % (status, body.decode()))
    return body
cnonce = bytes(range(32))
hello = struct.pack("<HHIQ", 1, 0, 0, 15) + cnonce + bytes(32)
r = call(1, hello)
major, minor, auth, caps = struct.unpack("<HHIQ", r[:16])
if auth == 1:
    snonce = r[16:48]
    mac = hmac.new(token, b"strata-rpc-client" + snonce + cnonce, hashlib.sha256).digest()
    r = call(1, struct.pack("<HHIQ", 1, 0, 1, 15) + cnonce + mac)
    assert struct.unpack("<I", r[4:8])[0] == 2, "not accepted"
    want = hmac.new(token, b"strata-rpc-server" + cnonce + snonce, hashlib.sha256).digest()
    assert r[48:80] == want, "server proof wrong"
info = call(2, b"")
total = struct.unpack("<Q", info[:8])[0]
assert total == 16777216, "memory_total %d" % total
handle, size = struct.unpack("<QQ", call(3, struct.pack("<Q", 64)))
data = bytes(range(100, 116))
call(6, struct.pack("<QQQII", handle, 8, len(data), 0, 0) + data, one_way=True)
got = call(9, struct.pack("<QQQ", handle, 8, 16))
assert got == data, "read back %r" % got
print("client ok from port %d" % s.getsockname()[1])
PY
}

start_worker
port=${addr##*:}
client "$port" "" >"$tmp/c1.txt"
# Garbage, then a well-behaved client again.
python3 -c "
import socket
s = socket.create_connection(('127.0.0.1', $port))
print(s.getsockname()[1], flush=True)
s.sendall(b'GET / HTTP/1.1\r\n\r\n' * 4)
s.recv(1)" >"$tmp/garbage.txt" 2>/dev/null || true
client "$port" "" >"$tmp/c2.txt"
stop_worker
# Each of the three connections is logged opened and closed, by its address. (Not a count of
# lines: while other tests run, a client of theirs that retries a port its own worker had may
# reach this worker, which took that port number after it was freed.)
for p in $(sed -n 's/^client ok from port //p' "$tmp/c1.txt" "$tmp/c2.txt") $(cat "$tmp/garbage.txt"); do
  for what in opened closed; do
    grep -q "connection tcp:127.0.0.1:$p $what" "$tmp/err.txt" ||
      { echo "FAIL: connection from port $p not logged as $what:"; cat "$tmp/err.txt"; exit 1; }
  done
done
[ "$(sed -n 's/^client ok from port //p' "$tmp/c1.txt" "$tmp/c2.txt" | wc -l)" = 2 ] &&
  [ -s "$tmp/garbage.txt" ] || { echo "FAIL: a client did not report its port"; exit 1; }

# With a token: the right one works, a wrong one is refused.
printf 'sesame\n' >"$tmp/token"
start_worker --auth-token-file "$tmp/token"
port=${addr##*:}
client "$port" sesame >"$tmp/c3.txt"
if client "$port" wrong >"$tmp/c4.txt" 2>&1; then
  echo "FAIL: a wrong token was accepted"
  exit 1
fi
grep -q "authentication failed" "$tmp/c4.txt" || { echo "FAIL: no refusal message"; cat "$tmp/c4.txt"; exit 1; }
stop_worker

# --idle-timeout: a client that says HELLO and then nothing is closed, and the log says why.
start_worker --idle-timeout 1
port=${addr##*:}
python3 - "$port" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
def recv_exact(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise SystemExit("FAIL: closed during the handshake")
        b += c
    return b
hello = struct.pack("<HHIQ", 1, 0, 0, 0) + bytes(64)
s.sendall(struct.pack("<IBBHIIQ", 0x43505253, 1, 0, 0, 1, 0, len(hello)) + hello)
n = struct.unpack("<Q", recv_exact(24)[16:24])[0]
body = recv_exact(n)
assert n >= 88 and struct.unpack("<Q", body[80:88])[0] == 1000, "idle_timeout_ms not offered"
assert s.recv(1) == b"", "the silent session was not closed"
PY
for _ in $(seq 100); do
  grep -q "closed: idle" "$tmp/err.txt" && break
  sleep 0.1
done
grep -q "closed: idle" "$tmp/err.txt" || { echo "FAIL: no idle close in the log"; cat "$tmp/err.txt"; exit 1; }
stop_worker
echo "worker_process: ok"
