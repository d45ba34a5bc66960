#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
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

# ... and the parts of one request are served one after another in
# the request's own thread: two connections each sending one 2M write
# at a time over a capacity of 1536K never have more than two requests
# at the backend, one per connection, whether nbdkit runs a
# connection's requests in parallel or serializes them (the
# noparallel filter).
for model in parallel serialize; do
  extra=
  [ $model = serialize ] && extra=--filter=noparallel
  start_nbdkit parts-$model --threads=16 --filter="$THROTTLE_FILTER" $extra \
    "$TEST_PLUGIN" delay-ms=10 statefile="$tmp/$model.state" \
    throttle-capacity=1536K -D throttle.verbose=1
  "$THROTTLE_LOAD" -t 2 -c 2 -q 1 -b 2M "$uri" >"$tmp/$model.out" ||
    { cat "$tmp/$model.out"; fail "$model: the load failed"; }
  stop_nbdkit $pid
  peak=$(statefield "$tmp/$model.state" peak_bytes)
  reqs=$(statefield "$tmp/$model.state" peak_requests)
  parts=$(grep -c "(a part)" "$tmp/parts-$model.log" || :)
  echo "$model: backend peak $peak bytes, $reqs requests; $parts parts"
  [ "$peak" -le 1572864 ] || fail "$model: backend peak $peak above the capacity"
  [ "$parts" -gt 0 ] || fail "$model: no request was served in parts"
  [ "$(summary "$tmp/parts-$model.log" in_flight)" = 0 ] ||
    fail "$model: units left in flight"
  [ "$reqs" -le 2 ] ||
    fail "$model: $reqs requests at the backend from two connections"
done

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

# 3. A request larger than the layers below accept is not split past
# them: a client ignoring the advertised maximum (libnbd strict mode
# off) sends a 2M write over an inner blocksize-policy filter that
# allows 1M and refuses larger with EINVAL.  2M is twice the capacity,
# so it would be served in 1M parts that the policy lets through.
for max in 4M plugin; do
  start_nbdkit parts-inner-$max --filter="$THROTTLE_FILTER" \
    --filter=blocksize-policy memory 16M blocksize-maximum=1M \
    blocksize-error-policy=error throttle-capacity=1M \
    throttle-max-request=$max -D throttle.verbose=1
  $PY - "$uri" >"$tmp/inner-$max.out" 2>&1 <<'PYEOF' ||
import errno, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
assert h.get_block_size(nbd.SIZE_MAXIMUM) == 1024 * 1024, \
    "advertised maximum %d, not the inner 1M" % h.get_block_size(nbd.SIZE_MAXIMUM)
h.set_strict_mode(0)
h.pwrite(b"a" * (1024 * 1024), 0)
try:
    h.pwrite(b"b" * (2 * 1024 * 1024), 0)
    raise SystemExit("the 2M write succeeded: it was split past the policy")
except nbd.Error as e:
    assert e.errnum == errno.EINVAL, "2M write: %s, not EINVAL" % e
assert h.pread(1024 * 1024, 0) == b"a" * (1024 * 1024), "the 2M write wrote"
h.shutdown()
print("2M write refused with EINVAL by the inner policy, nothing written")
PYEOF
    { cat "$tmp/inner-$max.out"; fail "throttle-max-request=$max: over an inner 1M maximum"; }
  stop_nbdkit $pid
  grep -q "(a part)" "$tmp/parts-inner-$max.log" &&
    fail "throttle-max-request=$max: a request was split past the inner maximum"
  echo "throttle-max-request=$max: $(cat "$tmp/inner-$max.out")"
done

# ... and with throttle-max-request=plugin a plugin's constraints (or
# their absence) are advertised unchanged.
constraints ()
{
  "$NBDKIT" -U - "$@" --run "$PY -c '
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
print([h.get_block_size(c) for c in
       (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM)])
' \"\$uri\"" 2>"$tmp/constraints.err" ||
    { cat "$tmp/constraints.err"; fail "constraints: $*"; }
}
for inner in "memory 16M" "--filter=blocksize-policy memory 16M blocksize-maximum=32M"; do
  plain=$(constraints $inner)
  through=$(constraints --filter="$THROTTLE_FILTER" $inner throttle-max-request=plugin)
  [ "$plain" = "$through" ] ||
    fail "throttle-max-request=plugin over $inner: advertised $through, not $plain"
  echo "throttle-max-request=plugin over $inner: advertised $through, as without the filter"
done
