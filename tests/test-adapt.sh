#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The latency target against real nbdkit: bad values of its parameters
# stop nbdkit with a message naming them; over a backend whose latency
# grows with the bytes in flight (the inflight plugin's bandwidth=),
# 4 writers x 8 writes of 256K and a reader push the latency far over a
# 5 ms target at the ceiling, so the effective capacity must come down,
# and stay within [floor, ceiling] at every look; every step is logged
# with -D throttle.adapt=1; set latency-target and set capacity work
# over the control socket and refuse bad values by name.  Directions
# and bounds only, never exact numbers: at the ceiling the backend takes
# 85 ms per request, 17 times the target, however slow the machine.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires_file "$THROTTLE_LOAD"

start_refused "throttle-latency-target=0: must be greater than 0" throttle-latency-target=0
start_refused "throttle-latency-target=0ms: must be greater than 0" throttle-latency-target=0ms
start_refused "throttle-latency-target=fast: expected a duration" throttle-latency-target=fast
start_refused "throttle-latency-target=3601: expected a duration of at most 1 hour" \
    throttle-latency-target=3601
start_refused "throttle-latency-target=-5ms: expected a duration" throttle-latency-target=-5ms
start_refused "throttle-latency-target=2h: expected a duration" throttle-latency-target=2h
start_refused "throttle-min-capacity=0: must be greater than 0" throttle-min-capacity=0
start_refused "throttle-min-capacity=lots: not a size" throttle-min-capacity=lots
start_refused "throttle-min-capacity=-1: not a size" throttle-min-capacity=-1
start_refused "throttle-min-capacity=2M: above throttle-capacity=1M" \
    throttle-capacity=1M throttle-min-capacity=2M throttle-latency-target=5ms
# The floor is checked with or without a target: one can be set live.
start_refused "throttle-min-capacity=2M: above throttle-capacity=1M" \
    throttle-capacity=1M throttle-min-capacity=2M
"$NBDKIT" --filter="$THROTTLE_FILTER" memory --help >"$tmp/help" 2>&1
for p in throttle-latency-target throttle-min-capacity; do
  grep -q "^$p=" "$tmp/help" || fail "--help does not list $p"
done
echo "ok: --help lists the parameters"

ctl=$tmp/ctl.sock
# Reads are not charged (throttle-rt=off: real-time threads would
# charge them), as the target is meant to be used.
start_nbdkit live --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=1 bandwidth=100M throttle-capacity=8M throttle-min-capacity=256K \
  throttle-latency-target=5ms throttle-rt=off throttle-control="$ctl" \
  -D throttle.adapt=1
live=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"

# ctl LINE...: send the lines, print the replies.
ctl ()
{
  ctl_send "$ctl" "$@"
}

sock=$tmp/live.sock
"$THROTTLE_LOAD" -c 4 -q 8 -b 256k -t 4 --unix "$sock" >"$tmp/writers.out" 2>&1 &
writers=$!
"$THROTTLE_LOAD" -c 1 -q 1 -b 4k -r 100 -t 4 --unix "$sock" >"$tmp/reader.out" 2>&1 &
reader=$!

# Look at the stats every 0.1 s while the load runs.
$PY - "$ctl" "$writers" >"$tmp/watch.out" <<'EOF' || fail "watching the stats failed"
import os, sys, time
import throttle_control as cc
ctl = cc.Control(sys.argv[1])
writers = int(sys.argv[2])
while True:
    r = ctl.ask('stats ""')
    # Until the first writer has opened it, the export does not exist:
    # the reply is an error.
    e = r.get("exports")
    if e is None and "unknown export" not in r.get("error", ""):
        sys.exit("unexpected reply: %r" % r)
    if e:
        a = e[0]["adapt"]
        print(e[0]["capacity"], a["floor"], a["ceiling"],
              a["steps_down"], a["steps_up"], flush=True)
    try:
        os.kill(writers, 0)
    except ProcessLookupError:
        break
    time.sleep(0.1)
EOF
wait $writers || { cat "$tmp/writers.out"; fail "the writers failed"; }
wait $reader || { cat "$tmp/reader.out"; fail "the reader failed"; }

n=$(wc -l < "$tmp/watch.out")
[ "$n" -ge 5 ] || fail "only $n looks at the stats"
# Every look: the budget's capacity within bounds.
awk '$1 < 262144 || $1 > 8388608 { print "capacity " $1 " out of bounds"; bad = 1 }
     $2 != 262144 || $3 != 8388608 { print "floor/ceiling " $2 "/" $3; bad = 1 }
     END { exit bad }' "$tmp/watch.out" ||
  fail "the capacity left [floor, ceiling] (see above)"
min=$(sort -n "$tmp/watch.out" | head -1 | cut -d' ' -f1)
last=$(tail -1 "$tmp/watch.out")
echo "capacity: lowest seen $min; last look: $last"
[ "$min" -lt 8388608 ] || fail "the capacity never came down from the ceiling"
down=$(echo "$last" | cut -d' ' -f4)
[ "$down" -gt 0 ] || fail "no step down counted"
echo "ok: capacity came down to $min, within [256K, 8M] at $n looks, $down steps down"

# -D throttle.adapt=1 logs every step, naming the export and the window.
logged=$(grep -c 'throttle: adapt: export "": capacity [0-9]* -> [0-9]* (down)' \
           "$tmp/live.log" || :)
[ "$logged" -ge 1 ] || fail "no step down in the debug log"
echo "ok: $logged steps down logged, e.g.:"
grep -m1 'throttle: adapt: export' "$tmp/live.log"

# clock_wakes: how often the latency target's clock thread woke in a
# second (its voluntary context switches): about 20 while an export
# has a target, none once none has.
clock_wakes ()
{
  $PY - "$live" <<'EOF'
import os, sys, time
task = "/proc/%s/task" % sys.argv[1]
def wakes():
    for t in os.listdir(task):
        try:
            if open("%s/%s/comm" % (task, t)).read().strip() != "throttle-clock":
                continue
            for line in open("%s/%s/status" % (task, t)):
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
        except FileNotFoundError:
            pass
    sys.exit("no throttle-clock thread")
a = wakes(); time.sleep(1); print(wakes() - a)
EOF
}

# The control socket.
expect ()
{
  local pattern=$1; shift
  local r
  r=$(ctl "$@")
  echo "$* -> $r"
  echo "$r" | grep -q -- "$pattern" || fail "$*: expected '$pattern'"
}
expect '"ok":true,"export":"","latency_target":"50ms","previous_ns":5000000' \
  'set latency-target "" 50ms'
expect '"latency_target_ns":50000000' 'stats ""'
expect 'error.*bad latency-target \\"0ms\\": must be greater than 0' \
  'set latency-target "" 0ms'
expect 'error.*bad latency-target \\"soon\\": expected a duration' \
  'set latency-target "" soon'
expect 'error.*bad latency-target \\"0\\": must be greater than 0' \
  'set latency-target "" 0'
# A plain number is seconds, as everywhere (lib/throttle-duration.h).
expect '"ok":true,"export":"","latency_target":"0.05","previous_ns":50000000' \
  'set latency-target "" 0.05'
expect 'error.*unknown export \\"nosuch\\"' 'set latency-target nosuch 5ms'
expect 'error.*usage: set capacity EXPORT N, or set latency-target' \
  'set latency-target ""'
expect '"latency_target_ns":50000000' 'stats ""'
# With a target, set capacity moves the ceiling, not below the floor.
expect 'error.*capacity 131072 is below throttle-min-capacity=262144' \
  'set capacity "" 128K'
expect '"ok":true.*"capacity":4194304,"previous":8388608' 'set capacity "" 4M'
expect '"ceiling":4194304' 'stats ""'
# Off: the fixed capacity again, the ceiling.
expect '"ok":true,"export":"","latency_target":"off","previous_ns":50000000' \
  'set latency-target "" off'
expect '"capacity":4194304,.*"adapt":{"latency_target_ns":null' 'stats ""'
# No export has a target: the clock waits for one (a tick under way
# when the target went off may still end).
w=$(clock_wakes) || fail "the clock thread was not found"
[ "$w" -le 1 ] || fail "the clock woke $w times in a second with no target"
echo "ok: with no target the clock woke $w times in a second"
# Without a target any capacity goes; then a target is refused until
# the capacity is back above the floor.
expect '"ok":true' 'set capacity "" 128K'
expect 'error.*cannot set a latency-target: the capacity 131072 is below throttle-min-capacity=262144' \
  'set latency-target "" 5ms'
expect '"ok":true' 'set capacity "" 8M'
expect '"ok":true.*"previous_ns":null' 'set latency-target "" 5ms'
expect '"capacity":8388608,.*"latency_target_ns":5000000,"floor"' \
  'stats ""'
# A target again: the clock ticks again, 20 times a second.
w=$(clock_wakes) || fail "the clock thread was not found"
[ "$w" -ge 3 ] || fail "the clock woke $w times in a second with a target"
echo "ok: with a target the clock woke $w times in a second"
expect '"set latency-target EXPORT DURATION|off"' help

# Set live, the target works as at start: a short load brings it down.
"$THROTTLE_LOAD" -c 4 -q 8 -b 256k -t 1.5 --unix "$sock" >"$tmp/writers2.out" 2>&1 ||
  { cat "$tmp/writers2.out"; fail "the second writers failed"; }
r=$(ctl 'stats ""')
cap=$(echo "$r" | $PY -c 'import json, sys; print(json.load(sys.stdin)["exports"][0]["capacity"])')
[ "$cap" -lt 8388608 ] && [ "$cap" -ge 262144 ] ||
  fail "after a target set live, the capacity is $cap"
echo "ok: a target set live brought the capacity to $cap"

stop_nbdkit $live
echo "PASS"
