#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The bound at every instant with a request above the capacity (issue
# 38): one that cannot be split is charged its full size and runs
# alone, so that a capacity raised over it, by the operator or by the
# latency target, admits beside it only what fits the new capacity
# with it.  Over the inflight plugin's gate-dir=, which holds each
# request by its offset and writes what the plugin held when it came
# in, so that each state is reached by the test's own steps, whatever
# the machine's speed.  Before the fix a clamped request was charged
# the capacity it arrived under: 1M+1 at 64K, then 4M: the plugin held
# 5,177,345 bytes under a capacity of 4M.  The sequences are numbered
# as they were written; the latency target's runs last.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"

K=1024
M=$((1024 * 1024))
gates=$tmp/gates
ctl=$tmp/ctl.sock
writers=()

# write_bg OFFSET COUNT [EXPORT]: one write on a connection of its own
# (to EXPORT, default ""), in the background (its exit status checked
# by wait_writers).  With READY set, the connection is made, READY
# written, and the write waits until READY.go exists.
write_bg ()
{
  $PY - "$sock" "$1" "$2" "${3:-}" "${READY:-}" >"$tmp/write-$1.out" 2>&1 <<'PYEOF' &
import os, sys, time, nbd
sock, offset, count, name, ready = sys.argv[1:6]
h = nbd.NBD()
h.set_export_name(name)
h.connect_unix(sock)
h.set_strict_mode(0)
if ready:
    open(ready, "w").close()
    while not os.path.exists(ready + ".go"):
        time.sleep(0.01)
h.pwrite(b"x" * int(count), int(offset))
h.shutdown()
PYEOF
  writers+=($!)
}

wait_writers ()
{
  local w
  for w in "${writers[@]}"; do
    wait "$w" || { cat "$tmp"/write-*.out; fail "$1: a write failed"; }
  done
  writers=()
}

# arrived OFFSET: the request at OFFSET is at the plugin.
arrived ()
{
  test -f "$gates/arrived.$1"
}

# held OFFSET: the bytes the plugin held once the request at OFFSET
# came in, its own included.
held ()
{
  cut -d' ' -f1 "$gates/arrived.$1"
}

# export_field FIELD: the default export's statistic, now.
export_field ()
{
  $PY - "$ctl" "$1" <<'PYEOF'
import sys, throttle_control as t
c = t.Control(sys.argv[1])
print(t.export_stats(c)[sys.argv[2]])
PYEOF
}

waits ()
{
  [ "$(export_field waiters)" -ge 1 ]
}

# arrived_or_waits OFFSET: the request at OFFSET is at the plugin or
# waits for credit: one of the two, whichever the filter does.
arrived_or_waits ()
{
  arrived "$1" || waits
}

# start NAME ARGS...: the plugin with gates, the filter with a control
# socket.
start ()
{
  local name=$1; shift
  rm -rf "$gates"; mkdir "$gates"
  rm -f "$ctl"
  start_nbdkit "$name" --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=0 gate-dir="$gates" statefile="$tmp/$name.state" \
    throttle-control="$ctl" "$@"
  sock=$tmp/$name.sock
  wait_for_socket "$ctl" "$pid" || fail "$name: no control socket"
}

# finish NAME CAP: let every request go, stop, and check that the plugin
# never held more than CAP bytes.
finish ()
{
  local name=$1 cap=$2 peak
  rm -f "$gates"/[0-9]*
  wait_writers "$name"
  stop_nbdkit "$pid"
  peak=$(statefield "$tmp/$name.state" peak_bytes)
  [ "$(summary "$tmp/$name.log" in_flight)" = 0 ] ||
    fail "$name: units left in flight"
  [ "$peak" -le "$cap" ] ||
    fail_later "$name: the plugin held $peak bytes at once, above the capacity $cap"
  echo "$name: the plugin held at most $peak bytes (capacity $cap)"
}

# 1. An unaligned 1M+1 write (never split) at a capacity of 64K runs
# alone; the operator raises the capacity to 4M; a 4M write comes: in
# parts, its first gets only what the 1M+1 leaves of the 4M.
start raise-unaligned throttle-capacity=64K
touch "$gates/0"
write_bg 0 $((M + 1))
wait_until 60 "$pid" arrived 0 || fail "raise-unaligned: the 1M+1 write never reached the plugin"
ctl_send "$ctl" 'set capacity "" 4M' >/dev/null
touch "$gates/$((8 * M))"
write_bg $((8 * M)) $((4 * M))
wait_until 60 "$pid" arrived_or_waits $((8 * M)) ||
  fail "raise-unaligned: the 4M write neither arrived nor waits"
if arrived $((8 * M)); then
  [ "$(held $((8 * M)))" -le $((4 * M)) ] ||
    fail_later "raise-unaligned: with the 4M write's first part in, the plugin held $(held $((8 * M))) bytes under a capacity of 4M"
fi
finish raise-unaligned $((4 * M))

# 2. An aligned 1M write decided whole at 4M waits behind a 4M write;
# the capacity drops to 64K: granted when the 4M write is done, alone,
# in full; the capacity rises to 4M; a 4M write joins it only with what
# it leaves.
start lower-then-raise throttle-capacity=4M
touch "$gates/0" "$gates/$((8 * M))"
write_bg 0 $((4 * M))
wait_until 60 "$pid" arrived 0 || fail "lower-then-raise: the first 4M write never reached the plugin"
write_bg $((8 * M)) $((1 * M))
wait_until 60 "$pid" waits || fail "lower-then-raise: the 1M write does not wait"
ctl_send "$ctl" 'set capacity "" 64K' >/dev/null
rm -f "$gates/0"
wait_until 60 "$pid" arrived $((8 * M)) ||
  fail "lower-then-raise: the 1M write was not granted when nothing else was in flight"
[ "$(held $((8 * M)))" = $((1 * M)) ] ||
  fail "lower-then-raise: the 1M write was not alone ($(held $((8 * M))) bytes)"
[ "$(export_field clamped)" -ge 1 ] ||
  fail "lower-then-raise: the 1M write under 64K was not counted as clamped"
ctl_send "$ctl" 'set capacity "" 4M' >/dev/null
touch "$gates/$((16 * M))"
write_bg $((16 * M)) $((4 * M))
wait_until 60 "$pid" arrived_or_waits $((16 * M)) ||
  fail "lower-then-raise: the second 4M write neither arrived nor waits"
if arrived $((16 * M)); then
  [ "$(held $((16 * M)))" -le $((4 * M)) ] ||
    fail_later "lower-then-raise: the plugin held $(held $((16 * M))) bytes under a capacity of 4M"
fi
finish lower-then-raise $((4 * M))

# 4. The server-wide bound, raised over a request above it: exports a
# and b, both connected (so that both are bound by the server's
# budget), at 64K each and 64K for the server; an unaligned 1M+1 write
# to a runs alone; the server's capacity, then both exports', rise to
# 4M; a 3.5M write to b fits b but not the server beside the 1M+1.
start server-raise throttle-capacity=64K throttle-server-capacity=64K
READY=$tmp/b.ready write_bg $((8 * M)) $((3584 * K)) b
wait_until 60 "$pid" test -f "$tmp/b.ready" || fail "server-raise: no connection to b"
touch "$gates/1"
write_bg 1 $((M + 1)) a
wait_until 60 "$pid" arrived 1 || fail "server-raise: the 1M+1 write never reached the plugin"
for line in 'set server-capacity 4M' 'set capacity "a" 4M' 'set capacity "b" 4M'; do
  ctl_send "$ctl" "$line" | grep -q '"ok":true' || fail "server-raise: $line refused"
done
touch "$gates/$((8 * M))" "$tmp/b.ready.go"
server_waits ()
{
  $PY - "$ctl" <<'PYEOF'
import sys, throttle_control as t
c = t.Control(sys.argv[1])
sys.exit(0 if c.ask("stats")["server"]["waiters"] >= 1 else 1)
PYEOF
}
wait_until 60 "$pid" eval 'arrived $((8 * M)) || server_waits' ||
  fail "server-raise: the 3.5M write neither arrived nor waits at the server"
if arrived $((8 * M)); then
  [ "$(held $((8 * M)))" -le $((4 * M)) ] ||
    fail_later "server-raise: the plugin held $(held $((8 * M))) bytes under a server capacity of 4M"
fi
finish server-raise $((4 * M))

# 3. The latency target steps the capacity up over a clamped write.
# Reads are not charged (throttle-rt=off): held at their gate for three
# times the target, each window's read is far over it and the capacity
# halves, down to the floor, 64K.  Then an unaligned 1M+1 write runs
# alone and a 4M write waits; reads that return at once are fast
# windows with work waiting, and the capacity steps up.  The 4M
# write's first part must not come in until it fits beside the 1M+1:
# what the plugin then holds is within the capacity, which cannot
# move while nothing waits.
start target-up throttle-capacity=4M throttle-min-capacity=64K \
  throttle-latency-target=20ms throttle-rt=off -D throttle.adapt=1
R=$((64 * M))
# read_loop N HOLD_S: N reads at R, each held at its gate HOLD_S
# seconds (0: not held); stops early once STOP exists.
read_loop ()
{
  $PY - "$uri" "$gates" "$R" "$1" "$2" <<'PYEOF'
import os, sys, time, nbd
uri, gates, r, n, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), float(sys.argv[5])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(n):
    if os.path.exists(os.path.join(gates, "STOP")):
        break
    if hold > 0:
        open(os.path.join(gates, str(r)), "w").close()
        c = h.aio_pread(nbd.Buffer(4096), r)
        while not os.path.exists(os.path.join(gates, "arrived.%d" % r)):
            h.poll(10)
        time.sleep(hold)
        os.unlink(os.path.join(gates, str(r)))
        while not h.aio_command_completed(c):
            h.poll(-1)
        os.unlink(os.path.join(gates, "arrived.%d" % r))
    else:
        h.pread(4096, r)
        time.sleep(0.005)
h.shutdown()
PYEOF
}
at_floor ()
{
  [ "$(export_field capacity)" = $((64 * K)) ]
}
for i in $(seq 40); do
  at_floor && break
  read_loop 1 0.06
done
at_floor || fail "target-up: the capacity did not come down to the floor: $(export_field capacity)"
# The steps from here on are logged; the highest capacity they reach
# bounds the capacity in force when the first part was granted (a slow
# window on a loaded machine may step it down again after that).
mark=$(wc -l <"$tmp/target-up.log")
touch "$gates/1" "$gates/$((8 * M))"
write_bg 1 $((M + 1))
wait_until 60 "$pid" arrived 1 || fail "target-up: the 1M+1 write never reached the plugin"
write_bg $((8 * M)) $((4 * M))
wait_until 60 "$pid" waits || fail "target-up: the 4M write does not wait"
read_loop 100000 0 &
reader=$!
wait_until 120 "$pid" arrived $((8 * M)) ||
  fail "target-up: the 4M write was never granted a part (capacity $(export_field capacity))"
touch "$gates/STOP"
wait "$reader" || fail "target-up: the reads failed"
grep -q "(up)" "$tmp/target-up.log" || fail "target-up: the capacity never stepped up"
cap=$(tail -n +$((mark + 1)) "$tmp/target-up.log" |
        sed -n 's/.*throttle: adapt: export "": capacity \([0-9]*\) -> \([0-9]*\) .*/\1\n\2/p' |
        sort -n | tail -n 1)
[ -n "$cap" ] || fail "target-up: no step logged after the floor"
[ "$(held $((8 * M)))" -le "$cap" ] ||
  fail_later "target-up: the plugin held $(held $((8 * M))) bytes with the 4M write's first part in, above the highest capacity since the floor, $cap"
echo "target-up: the first part came in with $(held $((8 * M))) bytes at the plugin; the highest capacity since the floor: $cap"
rm -f "$gates"/[0-9]*
wait_writers target-up
stop_nbdkit "$pid"
[ "$(summary "$tmp/target-up.log" in_flight)" = 0 ] ||
  fail "target-up: units left in flight"
