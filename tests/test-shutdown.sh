#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# SIGTERM to an nbdkit whose requests are blocked in the throttle exits
# within 5 seconds, and the waits give back nothing they did not hold.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

# One 64K write fills the capacity and sleeps 60 s in the backend; the
# other 15 wait for credit.  At SIGTERM that sleep ends, its write
# fails and credits its units, and the waiter granted them must see
# that the server is quitting whichever thread is scheduled first:
# three busy loops keep both CPUs taken, as a loaded machine does
# (where a check trusting a watcher thread alone let all 16 writes run
# in 8 of 20 runs), for five rounds.
hogs=()
for i in 1 2 3; do
  sh -c 'while :; do :; done' &
  hogs+=($!); _pids+=($!)
done

round ()
{
  local r=$1 i writes start end
  start_nbdkit shutdown-$r --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=60000 statefile="$tmp/shutdown-$r.state" throttle-capacity=64K \
    -D throttle.verbose=1
  $PY "$srcdir/client.py" "$uri" --conns 2 --depth 8 --count 8 --timeout 120 \
    >"$tmp/client-$r.out" 2>&1 &
  client=$!
  for i in $(seq 100); do
    grep -q "throttle: wait" "$tmp/shutdown-$r.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "throttle: wait" "$tmp/shutdown-$r.log" || fail "round $r: no request waited"
  sleep 0.5
  start=$(date +%s.%N)
  stop_nbdkit $pid 5
  end=$(date +%s.%N)
  echo "round $r: nbdkit exited $(echo "$end - $start" | bc) s after SIGTERM"
  wait $client || :
  cat "$tmp/client-$r.out"
  # The waiters are abandoned, not run: were waits not ended by a
  # shutdown, all 16 would run.
  writes=$(statefield "$tmp/shutdown-$r.state" writes)
  [ "$writes" -lt 8 ] ||
    fail "round $r: $writes of 16 writes ran: the waits were not abandoned at shutdown"
  [ "$(summary "$tmp/shutdown-$r.log" in_flight)" = 0 ] || fail "round $r: units left in flight"
  [ "$(summary "$tmp/shutdown-$r.log" cancelled)" -ge 1 ] || fail "round $r: no wait was cancelled"
  grep -q "abandoned while waiting for credit" "$tmp/shutdown-$r.log" ||
    fail "round $r: no clear error for the abandoned waits"
  echo "round $r: $writes of 16 writes ran"
}

for r in 1 2 3 4 5; do
  round $r
done
kill "${hogs[@]}" 2>/dev/null || :

# An ordinary shutdown logs no error line: nothing was waiting, so no
# thread of the filter asked nbdkit_nanosleep whether nbdkit is
# quitting (its failure is an error line: "aborting sleep because of
# server shut down"), neither at SIGTERM nor at the end of --run.
start_nbdkit quiet --filter="$THROTTLE_FILTER" memory 1M
$PY "$srcdir/client.py" "$uri" --conns 2 --depth 4 --count 16 --timeout 60 \
  >"$tmp/quiet.out" || fail "quiet: the client failed"
stop_nbdkit $pid
! grep "error:" "$tmp/quiet.log" || fail "quiet: an error line at SIGTERM"
"$NBDKIT" -v -U - --filter="$THROTTLE_FILTER" memory 1M \
  --run "$PY $srcdir/client.py \"\$uri\" --conns 1 --count 4 --timeout 60" \
  >"$tmp/quiet-run.log" 2>&1 || { cat "$tmp/quiet-run.log"; fail "quiet: --run failed"; }
! grep "error:" "$tmp/quiet-run.log" || fail "quiet: an error line at the end of --run"
echo "an ordinary shutdown logs no error line"

