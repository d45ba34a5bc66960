#!/usr/bin/env bash
# SIGTERM to an nbdkit whose requests are blocked in the throttle exits
# within 5 seconds, and the waits give back nothing they did not hold.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

# One 64K write fills the capacity and sleeps 60 s in the backend; the
# other 15 wait for credit.
start_nbdkit shutdown --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=60000 statefile="$tmp/shutdown.state" throttle-capacity=64K \
  -D throttle.verbose=1
$PY "$srcdir/client.py" "$uri" --conns 2 --depth 8 --count 8 --timeout 120 \
  >"$tmp/client.out" 2>&1 &
client=$!
for i in $(seq 100); do
  grep -q "throttle: wait" "$tmp/shutdown.log" 2>/dev/null && break
  sleep 0.1
done
grep -q "throttle: wait" "$tmp/shutdown.log" || fail "no request waited"
sleep 0.5
start=$(date +%s.%N)
stop_nbdkit $pid 5
end=$(date +%s.%N)
echo "nbdkit exited $(echo "$end - $start" | bc) s after SIGTERM"
wait $client || :
cat "$tmp/client.out"
# The waiters are abandoned, not run: at SIGTERM the backend's 60 s
# sleep ends (failing its write) and credits its units, and a waiter
# granted them before the filter's watcher thread has seen the signal
# runs (and fails at once, like any request reaching the backend at
# the signal).  That is one or two of them; were waits not ended by a
# shutdown, all 16 would run.
writes=$(statefield "$tmp/shutdown.state" writes)
[ "$writes" -lt 8 ] || fail "$writes of 16 writes ran: the waits were not abandoned at shutdown"
[ "$(summary "$tmp/shutdown.log" in_flight)" = 0 ] || fail "units left in flight"
[ "$(summary "$tmp/shutdown.log" cancelled)" -ge 1 ] || fail "no wait was cancelled"
grep -q "abandoned while waiting for credit" "$tmp/shutdown.log" ||
  fail "no clear error for the abandoned waits"
