#!/usr/bin/env bash
# A client that vanishes while its requests wait for credit leaks
# nothing: afterwards a new client gets the whole capacity.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

# nbdkit 1.32 itself can abort in raw_send_socket ("Assertion `sock >=
# 0' failed") when requests of a connection fail after its client has
# vanished, with or without this filter (see BUGS in the man page).
# That abort is retried, up to 3 attempts, and reported; anything else
# fails at once.
upstream_abort ()
{
  grep -q "raw_send_socket: Assertion" "$tmp/disc.log"
}

# One 64K write runs in the backend, the rest wait.  Sanitizer builds
# widen nbdkit's race so much that 15 waiters hit it every time: there
# one waits.
queued=16
[ -n "${SANITIZERS:-}" ] && [ "$SANITIZERS" != no ] && queued=2

attempt ()
{
  start_nbdkit disc --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=1500 statefile="$tmp/disc.state" throttle-capacity=64K
  $PY "$srcdir/client.py" "$uri" --conns 1 --depth $queued --count $queued --timeout 120 \
    >/dev/null 2>&1 &
  local client=$!
  sleep 0.7
  kill -9 $client
  wait $client 2>/dev/null || :

  # The abandoned waits must end and the held credit come back: a write
  # of the whole capacity is admitted.  If a unit leaked it would wait
  # forever and the client would time out.
  if ! $PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size 65536 \
       --count 1 --timeout 20; then
    upstream_abort && return 2
    fail "a capacity-sized write was not admitted after the disconnect"
  fi
  if ! kill -0 $pid 2>/dev/null; then
    upstream_abort && return 2
    fail "nbdkit died"
  fi
  stop_nbdkit $pid
  upstream_abort && return 2
  return 0
}

for try in 1 2 3; do
  r=0
  attempt || r=$?
  [ $r = 0 ] && break
  echo "attempt $try: nbdkit 1.32 aborted in raw_send_socket (upstream bug), retrying"
  kill -9 $pid 2>/dev/null || :
  [ $try = 3 ] && fail "nbdkit 1.32's raw_send_socket abort in 3 attempts out of 3"
done

writes=$(statefield "$tmp/disc.state" writes)
echo "backend saw $writes writes; cancelled waits: $(summary "$tmp/disc.log" cancelled)"
[ "$(summary "$tmp/disc.log" in_flight)" = 0 ] || fail "units left in flight"
[ "$(summary "$tmp/disc.log" cancelled)" -ge 1 ] || fail "no wait was cancelled by the disconnect"
# The vanished client's waiting requests were abandoned, not run.
[ "$writes" -le 3 ] || fail "$writes writes ran: waits were not abandoned"
