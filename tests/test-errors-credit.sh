#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Backend errors return their credit: with nbdkit's error filter under
# the throttle failing writes, zeroes and trims, afterwards the whole
# capacity is available again.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires $PY -c 'import nbd'

# errors_then_full NAME FULL CLIENT-ARG...: with errors on, the client
# (client.py with these arguments) runs against the server started as
# NAME, and some of its requests must fail; with errors off, one request
# of FULL bytes, the whole capacity, must be admitted: a single leaked
# unit would block it forever (the client times out).  Then the server
# stops with nothing in flight.  Sets 'failed'.
errors_then_full ()
{
  local name=$1 full=$2
  shift 2
  $PY "$srcdir/client.py" "$uri" "$@" >"$tmp/client-$name.out"
  cat "$tmp/client-$name.out"
  failed=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' "$tmp/client-$name.out")
  [ "$failed" -gt 0 ] || fail "$name: the error filter injected no errors"
  rm "$tmp/errors-on"
  $PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size "$full" \
    --count 1 --timeout 10 ||
    fail "$name: the full capacity is not available after errors"
  stop_nbdkit $pid
  [ "$(summary "$tmp/$name.log" in_flight)" = 0 ] ||
    fail "$name: units left in flight"
}

touch "$tmp/errors-on"
start_nbdkit err --filter="$THROTTLE_FILTER" --filter=error memory 64M \
  error=EIO error-rate=30% error-file="$tmp/errors-on" \
  throttle-capacity=128K
errors_then_full err 131072 --conns 4 --depth 16 --count 64 \
  --op write,zero,trim
echo "$failed requests failed; in flight afterwards: 0"

# Parts that fail fail their request and return their credit too: 2M
# writes over a capacity of 1536K and a backend holding each write
# 10 ms, each served in parts (tests/test-parts-errors.sh: what the
# plugin and the client see of a failed part).
touch "$tmp/errors-on"
start_nbdkit err-parts --filter="$THROTTLE_FILTER" --filter=error \
  --filter=delay memory 64M error=EIO error-pwrite-rate=30% \
  error-file="$tmp/errors-on" wdelay=10ms throttle-capacity=1536K \
  -D throttle.verbose=1
errors_then_full err-parts 1572864 --conns 2 --depth 2 --size 2097152 \
  --count 16 --op write
parts=$(grep -c "(a part)" "$tmp/err-parts.log" || :)
[ "$parts" -gt 0 ] || fail "parts: no request was served in parts"
echo "parts: $failed of 32 2M writes failed, $parts parts; in flight afterwards: 0"
