#!/usr/bin/env bash
# A client that is done is still served: writes queued for credit when
# it sends NBD_CMD_DISC, or shuts down its write side, all reach the
# backend, and every reply it reads is 0.  Clients that vanish with
# many writes queued do not take the server down: the filter never
# turns a closing connection's requests into a burst of error replies
# (nbdkit 1.32 aborts in raw_send_socket when such replies race).
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"

upstream_abort ()
{
  grep -q "raw_send_socket: Assertion" "$1" && fail "nbdkit aborted: $(grep -m1 Assertion "$1")"
  return 0
}

# 8 pipelined 64K writes against a 64K capacity over a disk that holds
# each write 300 ms: one runs, seven wait for credit when the client
# says it is done.  In writeback mode the pool holds one write, so the
# others wait for credit and pool buffers.
for mode in writethrough writeback; do
  [ $mode = writeback ] && requires_writeback
  for how in disc halfclose; do
    name=done-$mode-$how
    start_nbdkit $name --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
      sleep=plain delay-ms=300 statefile="$tmp/$name.state" \
      throttle-capacity=64K throttle-mode=$mode -D throttle.verbose=1
    $PY "$srcdir/hostile-client.py" queued "$tmp/$name.sock" $how 8 65536 ||
      fail "$mode $how: a queued write failed"
    grep -q "throttle: wait" "$tmp/$name.log" ||
      fail "$mode $how: no write waited for credit"
    stop_nbdkit $pid
    upstream_abort "$tmp/$name.log"
    writes=$(statefield "$tmp/$name.state" writes)
    [ "$writes" = 8 ] || fail "$mode $how: $writes of 8 writes reached the backend"
    [ "$(summary "$tmp/$name.log" cancelled)" = 0 ] ||
      fail "$mode $how: a wait was cancelled"
    [ "$(summary "$tmp/$name.log" in_flight)" = 0 ] ||
      fail "$mode $how: units left in flight"
    echo "$mode $how: 8 of 8 writes reached the backend"
  done
done

# 50 clients each queue 16 writes and vanish.  Twice: over a disk that
# keeps writing (the vanished clients' writes are served, their
# replies find no one) and over one that fails a request as soon as
# its client has gone (nbdkit_nanosleep), so that every queued write
# becomes an error reply, one credit after another.
for sleep in plain nbdkit; do
  name=vanish-$sleep
  # Over the failing disk, 8 writes fit in the capacity: one credit
  # lets 8 waiters of a client through, to fail together.
  size=32768
  [ $sleep = nbdkit ] && size=4096
  start_nbdkit $name --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    sleep=$sleep delay-ms=2 statefile="$tmp/$name.state" \
    throttle-capacity=32K
  $PY "$srcdir/hostile-client.py" vanishers "$tmp/$name.sock" 50 16 $size
  # The server is alive and its budget whole: a capacity-sized write
  # from a new client is admitted (behind what is still queued).
  $PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size 32768 \
    --count 1 --timeout 60 >/dev/null ||
    { upstream_abort "$tmp/$name.log"; fail "$sleep: a new client was not served"; }
  kill -0 $pid 2>/dev/null || fail "$sleep: nbdkit died"
  stop_nbdkit $pid 10
  upstream_abort "$tmp/$name.log"
  [ "$(summary "$tmp/$name.log" in_flight)" = 0 ] || fail "$sleep: units left in flight"
  echo "vanish over sleep=$sleep: server alive, $(statefield "$tmp/$name.state" writes) writes reached the backend"
done
