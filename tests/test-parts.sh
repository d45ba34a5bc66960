#!/usr/bin/env bash
# Large reads and writes are served in parts, each charged on its own:
# the backend never has more than the capacity in flight, nothing is
# clamped, and the data is intact (throttle-load --verify writes a
# checkable pattern, reads everything back) in both modes.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$THROTTLE_LOAD"
requires_file "$TEST_PLUGIN"

# 1. The bound at the backend: 1M writes (twice the capacity) among 4K
# writes, over a backend holding each request 10 ms.
start_nbdkit parts-bound --threads=64 --filter="$THROTTLE_FILTER" \
  "$TEST_PLUGIN" delay-ms=10 statefile="$tmp/bound.state" \
  throttle-capacity=512K -D throttle.verbose=1
"$THROTTLE_LOAD" -t 2 -c 4 -q 16 -b 4k:90,1M:10 --random "$uri" \
  >"$tmp/bound.out" || { cat "$tmp/bound.out"; fail "the load failed"; }
stop_nbdkit $pid
peak=$(statefield "$tmp/bound.state" peak_bytes)
parts=$(grep -c "(a part)" "$tmp/parts-bound.log" || :)
echo "bound: backend peak $peak (capacity 524288), $parts parts admitted, clamped=$(summary "$tmp/parts-bound.log" clamped)"
[ "$peak" -le 524288 ] || fail "backend peak $peak above the capacity"
[ "$parts" -gt 0 ] || fail "no request was served in parts"
[ "$(summary "$tmp/parts-bound.log" clamped)" = 0 ] || fail "a request was clamped"
[ "$(summary "$tmp/parts-bound.log" in_flight)" = 0 ] || fail "units left in flight"

# ... and with throttle-split=false every request is charged whole:
# no part, the 1M writes clamped.
start_nbdkit parts-off --threads=64 --filter="$THROTTLE_FILTER" \
  "$TEST_PLUGIN" delay-ms=10 throttle-capacity=512K throttle-split=false \
  -D throttle.verbose=1
"$THROTTLE_LOAD" -t 1 -c 4 -q 16 -b 4k:90,1M:10 --random "$uri" \
  >"$tmp/off.out" || { cat "$tmp/off.out"; fail "the load failed (split off)"; }
stop_nbdkit $pid
grep -q "(a part)" "$tmp/parts-off.log" && fail "throttle-split=false: a request was split"
[ "$(summary "$tmp/parts-off.log" clamped)" -gt 0 ] ||
  fail "throttle-split=false: no 1M write was clamped"
echo "split off: no part, clamped=$(summary "$tmp/parts-off.log" clamped)"

# 2. The data: mixed sizes, reads charged too (so they come in parts as
# well), verified, in both modes.
for mode in writethrough writeback; do
  [ $mode = writeback ] && requires_writeback
  start_nbdkit parts-$mode --filter="$THROTTLE_FILTER" memory 256M \
    throttle-capacity=256K throttle-reads=true throttle-mode=$mode \
    -D throttle.verbose=1
  "$THROTTLE_LOAD" -t 2 -c 4 -q 8 -b 4k:60,512k:20,1M:20 -r 30 --random \
    --verify "$uri" >"$tmp/$mode.out" ||
    { cat "$tmp/$mode.out"; fail "$mode: throttle-load --verify failed"; }
  grep -i "mismatch\|verify" "$tmp/$mode.out" | head -3
  stop_nbdkit $pid
  parts=$(grep -c "(a part)" "$tmp/parts-$mode.log" || :)
  [ "$parts" -gt 0 ] || fail "$mode: no request was served in parts"
  [ "$(summary "$tmp/parts-$mode.log" in_flight)" = 0 ] ||
    fail "$mode: units left in flight"
  echo "$mode: verified, $parts parts"
done
