#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The control socket, against a real nbdkit under load: the socket is
# private (0600 whatever the umask), never replaces a file that is not a
# socket, a socket another server serves, nor one it cannot connect to
# (another user's), but does replace a stale one; stats agree with what
# the clients and the backend saw; set capacity takes effect both ways;
# bad input, silent, flooding and vanishing clients get an error or are
# dropped while the server keeps serving, and clients beyond the 32
# places close those idle longest (in full: test-control-full.sh); the
# socket is removed at exit.  The live part is tests/throttle_control.py.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

ctl=$tmp/ctl.sock
client=$srcdir/throttle_control.py

# expect_refusal WHAT PATTERN ARGS...: nbdkit must exit non-zero at once
# with an error matching PATTERN.
expect_refusal ()
{
  local what=$1 pattern=$2 r=0; shift 2
  timeout 20 "$NBDKIT" -f -U "$tmp/refused.sock" \
    --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" "$@" \
    >"$tmp/refused.log" 2>&1 || r=$?
  cat "$tmp/refused.log"
  [ "$r" -ne 0 ] && [ "$r" -ne 124 ] ||
    fail "$what: nbdkit did not refuse (exit $r)"
  grep -q -- "$pattern" "$tmp/refused.log" ||
    fail "$what: no error matching '$pattern'"
  echo "ok: $what refused"
}

expect_refusal "throttle-control= (empty)" "throttle-control=: empty value" \
  throttle-control=
expect_refusal "a control path too long" "too long" \
  throttle-control="$tmp/$(printf 'x%.0s' $(seq 120))"

# A regular file is never replaced, and is left as it was.
echo precious > "$tmp/file"
expect_refusal "a regular file as the socket" "not a socket" \
  throttle-control="$tmp/file"
[ "$(cat "$tmp/file")" = precious ] || fail "the regular file was changed"
[ -f "$tmp/file" ] || fail "the regular file is gone"

# Another user's socket in a directory anyone may write to (0777, not
# sticky): connect fails with EACCES, which does not say that nobody
# serves it, so nbdkit refuses and the socket stays.  nbdkit runs as
# nobody through setpriv: with -u it would bind as root, before it
# drops privileges.  nobody gets its own copies of the filter (and of
# a sanitizer build's shim), and a log directory it can write.
if [ "$(id -u)" = 0 ]; then
  shared=$(mktemp -d /var/tmp/throttle-shared.XXXXXX)
  at_exit "rm -rf '$shared'"
  chmod 0777 "$shared"
  mkdir -m 0777 "$shared/logs"
  cp "$THROTTLE_FILTER" "$shared/filter.so"
  env=(THROTTLE_FILTER="$shared/filter.so" TMPDIR="$shared")
  if [ -n "${SANITIZER_SHIM:-}" ] && [ -f "$SANITIZER_SHIM" ]; then
    cp "$SANITIZER_SHIM" "$shared/shim.so"
    env+=(SANITIZER_SHIM="$shared/shim.so")
  fi
  [ -z "${THROTTLE_SANITIZER_LOGS:-}" ] ||
    env+=(THROTTLE_SANITIZER_LOGS="$shared/logs")
  chmod 0644 "$shared"/*.so
  $PY -c 'import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o600); s.listen()
open(sys.argv[2], "w").close()
time.sleep(600)' "$shared/root.sock" "$tmp/listening" &
  listener=$!
  _pids+=("$listener")
  wait_until 10 "$listener" test -e "$tmp/listening" ||
    fail "the root listener did not start"
  r=0
  timeout 20 env "${env[@]}" \
    setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$NBDKIT" -U - --filter="$shared/filter.so" memory 1M \
    throttle-control="$shared/root.sock" --run true \
    >"$tmp/eacces.log" 2>&1 || r=$?
  cat "$tmp/eacces.log"
  if [ -n "${THROTTLE_SANITIZER_LOGS:-}" ]; then
    mkdir -p "$THROTTLE_SANITIZER_LOGS"
    cp -r "$shared/logs/." "$THROTTLE_SANITIZER_LOGS/"
  fi
  [ "$r" -ne 0 ] && [ "$r" -lt 124 ] ||
    fail "root's 0600 socket, nbdkit as nobody: did not refuse (exit $r)"
  want="throttle-control=$shared/root.sock: cannot tell whether another"
  want+=" process is serving this socket (connect: Permission denied):"
  want+=" refusing to replace it"
  [ "$(grep -c 'error:' "$tmp/eacces.log")" = 1 ] &&
    [ "$(sed -n 's/.*error: //p' "$tmp/eacces.log")" = "$want" ] ||
    fail "root's 0600 socket: the one error line is not: $want"
  [ "$(stat -c %U:%a "$shared/root.sock" 2>&1)" = root:600 ] ||
    fail "root's socket was replaced or removed"
  kill "$listener"
  wait "$listener" 2>/dev/null || :
  echo "ok: another user's socket, which nobody cannot probe, is kept"
else
  echo "note: not root: another user's socket (EACCES) not tested"
fi

# A served socket whose backlog is full: the probe fails with EAGAIN
# (not blocks), and that is no stale socket either.
$PY -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(0)
held = []
while True:
    c = socket.socket(socket.AF_UNIX); c.setblocking(False)
    try: c.connect(sys.argv[1])
    except BlockingIOError: break
    held.append(c)
open(sys.argv[2], "w").close()
time.sleep(600)' "$tmp/full.sock" "$tmp/full.ready" &
full=$!
_pids+=("$full")
wait_until 10 "$full" test -e "$tmp/full.ready" ||
  fail "the listener with a full backlog did not start"
expect_refusal "a socket with a full backlog" \
  "cannot tell whether .*(connect: Resource temporarily unavailable)" \
  throttle-control="$tmp/full.sock"
[ -S "$tmp/full.sock" ] || fail "the socket with a full backlog is gone"
kill "$full"
wait "$full" 2>/dev/null || :

# The socket is 0600 even when nbdkit inherits umask 000.
old_umask=$(umask)
umask 000
start_nbdkit live --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=50 statefile="$tmp/live.state" throttle-capacity=1M \
  export= export="$($PY "$client" odd-name)" \
  throttle-control="$ctl" -D throttle.control_timeout=2
umask "$old_umask"
live=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
mode=$(stat -c %a "$ctl")
[ "$mode" = 600 ] || fail "control socket mode is $mode, expected 600"
echo "ok: control socket mode $mode under umask 000"

# A socket that a live server serves is not taken over.
expect_refusal "a socket another server serves" "another process" \
  throttle-control="$ctl"
$PY "$client" send "$ctl" help | grep -q '"commands"' ||
  fail "the first server lost its control socket"
echo "ok: the first server still answers on its socket"

# The live test: load, stats, set capacity, bad input.
# A client refused a connection means nothing listened: say so if it
# was because nbdkit had died (once seen, unexplained, under load).
if ! $PY "$client" live "$tmp/live.sock" "$ctl" | tee "$tmp/live.out"; then
  # A dead nbdkit stays a zombie until waited for.
  st=0
  case $(cut -d' ' -f3 "/proc/$live/stat" 2>/dev/null || echo gone) in
    Z|gone) wait $live || st=$? ;;
  esac
  [ $st = 0 ] || fail "nbdkit exited during the live test (status $st)"
  fail "the live control test failed (see above)"
fi
total=$(sed -n 's/^total_writes=//p' "$tmp/live.out")
[ -n "$total" ] || fail "the live test did not report its writes"

stop_nbdkit $live
backend=$(statefield "$tmp/live.state" writes)
echo "writes: clients $total, throttle admitted (see above), backend $backend"
[ "$backend" = "$total" ] ||
  fail "the backend saw $backend writes, the control socket said $total"
echo "ok: the backend saw the $total writes the stats counted"
[ ! -e "$ctl" ] || fail "the control socket was not removed at exit"
echo "ok: control socket removed at exit"

# A stale socket (its server gone) is replaced.
$PY -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' "$ctl"
[ -S "$ctl" ] || fail "could not make a stale socket"
start_nbdkit stale --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  throttle-control="$ctl"
for i in $(seq 50); do
  $PY "$client" send "$ctl" help 2>/dev/null | grep -q '"commands"' && break
  sleep 0.1
done
$PY "$client" send "$ctl" help | grep -q '"commands"' ||
  fail "the stale socket was not replaced by a served one"
echo "ok: a stale socket is replaced"
stop_nbdkit $pid
[ ! -e "$ctl" ] || fail "the control socket was not removed at exit"

# Daemonized (no -f): the socket is bound before nbdkit forks and served
# by the thread started after the fork, the parent's exit leaves it in
# place, and a relative path survives the daemon's chdir to /.  A
# silent control client does not hold up the shutdown.
(cd "$tmp" && "$NBDKIT" -P "$tmp/d.pid" -U "$tmp/d.sock" \
   --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" throttle-control=d.ctl) ||
  fail "daemonized nbdkit did not start"
for i in $(seq 50); do [ -s "$tmp/d.pid" ] && break; sleep 0.1; done
dpid=$(cat "$tmp/d.pid")
_pids+=("$dpid")
[ -S "$tmp/d.ctl" ] || fail "no control socket after daemonizing"
$PY "$client" send "$tmp/d.ctl" help | grep -q '"commands"' ||
  fail "the daemon does not serve its control socket"
echo "ok: a daemonized nbdkit serves the control socket (relative path)"
$PY -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
time.sleep(20)' "$tmp/d.ctl" &
silent=$!
sleep 0.5
kill -TERM "$dpid"
for i in $(seq 50); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
kill "$silent" 2>/dev/null || :
wait "$silent" 2>/dev/null || :
! kill -0 "$dpid" 2>/dev/null ||
  fail "the daemon still runs 5 s after SIGTERM with a control client open"
[ ! -e "$tmp/d.ctl" ] || fail "the daemon did not remove its control socket"
echo "ok: SIGTERM with a silent control client: exits, socket removed"

# Writeback mode adds its state to each export's stats.
# (Into a file first: under pipefail, grep -q could fail the pipeline
# with nbdkit's SIGPIPE.)
"$NBDKIT" --filter="$THROTTLE_FILTER" null --help > "$tmp/help" 2>/dev/null || true
if grep -q 'throttle-mode=' "$tmp/help"; then
  start_nbdkit wb --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" delay-ms=20 \
    statefile="$tmp/wb.state" throttle-mode=writeback \
    throttle-control="$tmp/wb.ctl"
  $PY - "$tmp/wb.sock" "$tmp/wb.ctl" <<'EOF' || fail "writeback stats"
import json, socket, sys
import nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
for i in range(8):
    h.pwrite(b"w" * 65536, i * 65536)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[2])
f = s.makefile("rwb")
def stats():
    f.write(b'stats ""\n')
    f.flush()
    return json.loads(f.readline())["exports"][0]
e = stats()
print("before flush:", e)
assert "writeback" in e, "no writeback member"
h.flush()
e = stats()
wb = e["writeback"]
print("after flush:", e)
assert wb["pending_writes"] == 0 and wb["pool_used"] == 0, wb
assert wb["written"] + wb["direct"] == 8 and wb["failed"] == 0, wb
assert wb["pool_size"] > 0 and wb["error"] is None, wb
assert e["admitted"] == 8 and e["in_flight"] == 0, e
h.shutdown()
EOF
  stop_nbdkit $pid
  echo "ok: writeback state in the stats, all written after flush"
else
  echo "note: this filter has no throttle-mode: writeback stats not tested"
fi

echo "PASS"
