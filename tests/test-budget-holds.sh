#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The budget holds at the backend: with 4 connections each keeping 32
# writes of 64K queued (8 MiB wanted in flight) against a capacity of
# 256K, the backend never sees more than 256K in flight, and it does see
# close to 256K (the throttle does not serialize more than it must).
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

check ()
{
  local metric=$1 capacity=$2 limit=$3 name=holds-$1
  start_nbdkit $name --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=20 statefile="$tmp/$name.state" \
    throttle-capacity=$capacity throttle-metric=$metric
  $PY "$srcdir/client.py" "$uri" --conns 4 --depth 32 --size 65536 \
    --count 64 --op write,write,write,zero
  stop_nbdkit $pid
  local peak writes
  peak=$(statefield "$tmp/$name.state" peak_bytes)
  writes=$(statefield "$tmp/$name.state" writes)
  echo "metric=$metric capacity=$capacity: backend peak $peak bytes (limit $limit), $writes writes"
  [ "$writes" -eq 192 ] || fail "expected 192 writes at the backend, saw $writes"
  [ "$peak" -le "$limit" ] || fail "peak $peak exceeds the limit $limit"
  [ "$peak" -ge $((limit * 3 / 4)) ] ||
    fail "peak $peak is far below the limit $limit: the throttle serializes too much"
  [ "$(summary "$tmp/$name.log" in_flight)" = 0 ] || fail "units left in flight"
  [ "$(summary "$tmp/$name.log" waited)" -gt 0 ] || fail "nothing ever waited"
}

# 256K of payload; under pages 64 pages = 256K; under requests 4 x 64K.
check bytes 256K 262144
check pages 64 262144
check requests 4 262144
