#!/usr/bin/env bash
# A client that vanishes while its requests wait for credit leaks
# nothing: afterwards a new client gets the whole capacity.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

# One 64K write runs in the backend, 15 wait.  (One connection with
# one request in the backend: nbdkit 1.32 itself can abort in
# raw_send_socket when several requests fail at the same instant after
# a client vanishes, with or without this filter; see BUGS in the man
# page.)
start_nbdkit disc --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=1500 statefile="$tmp/disc.state" throttle-capacity=64K
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 16 --count 16 --timeout 120 \
  >/dev/null 2>&1 &
client=$!
sleep 0.7
kill -9 $client
wait $client 2>/dev/null || :

# The abandoned waits must end and the held credit come back: a write
# of the whole capacity is admitted.  If a unit leaked it would wait
# forever and the client would time out.
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size 65536 --count 1 \
  --timeout 20 || fail "a capacity-sized write was not admitted after the disconnect"
stop_nbdkit $pid
writes=$(statefield "$tmp/disc.state" writes)
echo "backend saw $writes writes; cancelled waits: $(summary "$tmp/disc.log" cancelled)"
[ "$(summary "$tmp/disc.log" in_flight)" = 0 ] || fail "units left in flight"
[ "$(summary "$tmp/disc.log" cancelled)" -ge 1 ] || fail "no wait was cancelled by the disconnect"
# Requests of the vanished client did not all run: most were abandoned.
[ "$writes" -le 3 ] || fail "$writes writes ran: waits were not abandoned"
