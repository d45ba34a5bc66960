#!/usr/bin/env bash
# Bad parameters stop nbdkit at start with an error naming the
# parameter; --help lists the parameters; -D throttle.verbose=1 logs
# admissions; a user metric charges what it says.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_METRIC"
requires_file "$TEST_NOMETRIC"

bad ()
{
  local expect=$1 rc=0; shift
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M "$@" --run true \
    >"$tmp/out" 2>&1 || rc=$?
  [ $rc != 0 ] || fail "nbdkit started with $*"
  [ $rc -lt 128 ] || { cat "$tmp/out"; fail "nbdkit crashed (exit $rc) with $*"; }
  grep -q -- "$expect" "$tmp/out" ||
    { cat "$tmp/out"; fail "$*: error does not say '$expect'"; }
  echo "rejected $*: $(grep -m1 error "$tmp/out")"
}

bad "throttle-capacity=0: must be greater than 0" throttle-capacity=0
bad "throttle-capacity=-1: must be a positive size" throttle-capacity=-1
bad "throttle-capacity=abc: not a size" throttle-capacity=abc
bad "throttle-capacity=: not a size" throttle-capacity=
bad "throttle-metric: unknown metric 'furlongs'" throttle-metric=furlongs
bad "throttle-metric: .*/nonexistent/metric.so" throttle-metric=/nonexistent/metric.so
bad "throttle-metric: .*does not define the symbol throttle_metric" \
    throttle-metric="$TEST_NOMETRIC"
bad "throttle-reads=maybe: expected true or false" throttle-reads=maybe
bad "throttle-split=maybe: expected true or false" throttle-split=maybe
bad "unknown parameter throttle-capacty" throttle-capacty=1M

# Writeback pools: allocated, touched and locked at the first
# connection, so one that cannot be had is refused at start, naming
# the parameter that sized it.  2^52 pages of 4096 bytes overflow 64
# bits (once to a pool of 0 bytes, once to one buffer); RAM's size
# (anything above half of it) does not fit.
wb="throttle-mode=writeback"
ram=$(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) ))
bad "throttle-capacity: 4503599627370496 pages of 4096 bytes overflow" \
    $wb throttle-metric=pages throttle-capacity=4503599627370496
bad "throttle-capacity: 4503599627370497 pages of 4096 bytes overflow" \
    $wb throttle-metric=pages throttle-capacity=4503599627370497
bad "throttle-capacity (the pool's default under throttle-metric=pages .*half of RAM" \
    $wb throttle-metric=pages throttle-capacity=4503599627370495
bad "throttle-capacity (the pool's default under throttle-metric=bytes).*half of RAM" \
    $wb throttle-capacity=$ram
bad "throttle-capacity (.*half of RAM" $wb throttle-capacity=9223372036854775807
bad "throttle-writeback-pool: a writeback pool of $ram bytes.*half of RAM" \
    $wb throttle-writeback-pool=$ram
# A pool of its own makes any capacity fine, and so does writethrough.
for ok in "$wb throttle-capacity=$ram throttle-writeback-pool=16M" \
          "throttle-capacity=$ram" \
          "throttle-metric=pages throttle-capacity=4503599627370496"; do
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M $ok --run true \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "refused: $ok"; }
done

"$NBDKIT" --filter="$THROTTLE_FILTER" memory --help >"$tmp/help" 2>&1
for p in throttle-capacity throttle-metric throttle-reads throttle-split; do
  grep -q "^$p=" "$tmp/help" || fail "--help does not list $p"
done

# Verbose debugging shows admissions; the user metric charges
# 1 + MiB started per write: 1 + 1 for a 64K write.
requires $PY -c 'import nbd'
start_nbdkit verbose --filter="$THROTTLE_FILTER" memory 16M \
  throttle-metric="$TEST_METRIC" throttle-capacity=10 -D throttle.verbose=1
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 4 --count 8 --size 65536
stop_nbdkit $pid
grep -q "throttle: admit write count=65536 offset=[0-9]* units=2" "$tmp/verbose.log" ||
  fail "verbose log has no admission charged 2 units by the user metric"
[ "$(summary "$tmp/verbose.log" charged)" = 16 ] ||
  fail "user metric: expected 16 units charged, got $(summary "$tmp/verbose.log" charged)"

# Without the flag, no per-request lines.
start_nbdkit quiet --filter="$THROTTLE_FILTER" memory 16M
$PY "$srcdir/client.py" "$uri" --conns 1 --count 4
stop_nbdkit $pid
! grep -q "throttle: admit" "$tmp/quiet.log" || fail "admissions logged without -D throttle.verbose=1"
