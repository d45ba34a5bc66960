#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A bounded soak (THROTTLE_SOAK_SECS, default 60) mixing everything the
# other hardening tests do, against one server, with the budget
# invariant checked throughout:
#  - load: rounds of writes, zeroes and trims from several connections;
#  - faults: the error filter fails 10% of writes, zeroes and trims,
#    switched on and off every few seconds;
#  - hostile clients: dropped mid-payload, dropped while waiting for
#    credit, reads larger than the capacity (reads are charged here),
#    floods that do not read their replies for a while;
#  - the control socket polled every 20 ms: in_flight <= capacity at
#    every reading;
# then SIGTERM under load (exit within 5 s), and the backend's peak
# (the test plugin) never above the capacity.  The oversized requests
# are reads, which the test plugin does not count; like writes they
# are served in parts of at most the capacity (test-parts.sh checks
# the backend's peak with oversized writes), never clamped.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'
"$NBDKIT" --filter=error null --dump-plugin >/dev/null 2>&1 ||
  { echo "$0: SKIP: nbdkit has no error filter"; exit 77; }

secs=${THROTTLE_SOAK_SECS:-60}
cap=262144
hc="$PY $srcdir/hostile-client.py"

touch "$tmp/faults.on"
start_nbdkit soak --filter="$THROTTLE_FILTER" --filter=error "$TEST_PLUGIN" \
  delay-ms=10 statefile="$tmp/soak.state" \
  error-pwrite=EIO error-pwrite-rate=10% error-zero=EIO error-zero-rate=10% \
  error-trim=EIO error-trim-rate=10% error-file="$tmp/faults.on" \
  throttle-capacity=$cap throttle-reads=true throttle-control="$tmp/soak.ctl"
srv=$pid
sock=$tmp/soak.sock

$hc stats "$tmp/soak.ctl" "$tmp/stats.out" $((secs + 5)) >"$tmp/stats.log" 2>&1 &
poller=$!

end=$(( $(date +%s) + secs ))
round=0 load_ok=0 load_failed=0 hostile=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  # Faults on for odd rounds, off for even ones.
  if [ $((round % 2)) = 1 ]; then touch "$tmp/faults.on"; else rm -f "$tmp/faults.on"; fi

  # Load in the background for this round.
  $PY "$srcdir/client.py" "$uri" --conns 4 --depth 16 \
    --size $(( (round % 4 + 1) * 16384 )) --count 100 \
    --op write,zero,write,trim --timeout 60 >"$tmp/load.$round" 2>&1 &
  load=$!

  # Hostile clients meanwhile, one kind per round in turn.
  case $((round % 4)) in
    0) $hc partial "$sock" 65536 $((round * 977 % 65536)) >/dev/null ;;
    1) vanished=()
       for i in 1 2 3; do $hc vanish "$sock" 131072 >/dev/null & vanished+=($!); done
       wait "${vanished[@]}" ;;
    2) $PY -c 'import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
for i in range(4): h.pread(1048576, i << 20)
h.shutdown()' "$uri" || fail "round $round: an oversized read failed" ;;
    3) $hc flood "$sock" 200 16384 1 >/dev/null 2>&1 || : ;;
  esac
  hostile=$((hostile + 1))
  wait $load || { cat "$tmp/load.$round"; fail "round $round: load did not complete"; }
  ok=$(sed -n 's/.* ok=\([0-9]*\).*/\1/p' "$tmp/load.$round")
  failed=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' "$tmp/load.$round")
  load_ok=$((load_ok + ok)) load_failed=$((load_failed + failed))
  kill -0 $poller 2>/dev/null || { cat "$tmp/stats.log"; fail "round $round: the invariant was violated"; }
done

# SIGTERM under load.
$PY "$srcdir/client.py" "$uri" --conns 4 --depth 16 --count 100000 \
  --timeout 60 >/dev/null 2>&1 &
load=$!
# The signal must find requests waiting for credit (the summary's
# 'cancelled' below): on a loaded machine the client can take more than
# a second to start, so wait until the control socket shows waiters.
$PY - "$tmp/soak.ctl" <<'EOF' || fail "no request waited for credit in 20 s before SIGTERM"
import json, socket, sys, time
end = time.monotonic() + 20
while time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
    s.sendall(b"stats\n")
    st = json.loads(s.makefile("rb").readline())
    s.close()
    if st["exports"][0]["waiters"] > 0:
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
EOF
stop_nbdkit $srv 5
wait $load 2>/dev/null || :
wait $poller || { cat "$tmp/stats.log"; fail "the control socket showed in_flight > capacity"; }
cat "$tmp/stats.out"

polls=$(statefield "$tmp/stats.out" polls)
maxif=$(statefield "$tmp/stats.out" max_in_flight)
peak=$(statefield "$tmp/soak.state" peak_bytes)
writes=$(statefield "$tmp/soak.state" writes)
echo "soak: ${secs}s, $round rounds, $load_ok ok / $load_failed failed requests, $hostile hostile clients, $writes writes at the backend"
echo "soak: $polls control readings, max in_flight $maxif (capacity $cap); backend peak $peak bytes"
echo "soak: summary cancelled=$(summary "$tmp/soak.log" cancelled) clamped=$(summary "$tmp/soak.log" clamped) waited=$(summary "$tmp/soak.log" waited) in_flight=$(summary "$tmp/soak.log" in_flight)"
[ "$polls" -gt $((secs * 5)) ] || fail "only $polls control readings in $secs s"
[ "$(statefield "$tmp/stats.out" violations)" = 0 ] || fail "in_flight exceeded the capacity"
[ "$maxif" -le $cap ] || fail "max in_flight $maxif above the capacity"
[ "$maxif" -gt 0 ] || fail "the control socket never saw anything in flight"
[ "$peak" -le $cap ] || fail "backend peak $peak above the capacity $cap"
[ "$load_failed" -gt 0 ] || fail "no fault was injected"
[ "$(summary "$tmp/soak.log" in_flight)" = 0 ] || fail "units left in flight at unload"
[ "$(summary "$tmp/soak.log" clamped)" = 0 ] || fail "an oversized request was clamped, not served in parts"
[ "$(summary "$tmp/soak.log" cancelled)" -gt 0 ] || fail "no wait was cancelled"
