#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Bad parameters stop nbdkit at start with exactly one error line,
# "KEY=VALUE: why" with the value as written; a key given twice too;
# --help lists the parameters; -D throttle.verbose=1 logs admissions;
# a user metric charges what it says.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_METRIC"
requires_file "$TEST_NOMETRIC"

# Each refusal: start_refused (functions.sh), over the memory plugin.

# Every parameter, with a value that is not of its kind and one of its
# kind that the parameter does not take: one line each, ours (nbdkit's
# parsers, which log a line of their own naming no parameter, are not
# called).
start_refused_line "throttle-capacity=0: must be greater than 0: a zero capacity would admit nothing" \
    throttle-capacity=0
start_refused_line "throttle-capacity=abc: not a size (not a number)" throttle-capacity=abc
start_refused_line "throttle-capacity=: not a size (not a number)" throttle-capacity=
start_refused_line "throttle-capacity=1Q: not a size (unknown suffix 'Q')" throttle-capacity=1Q
start_refused_line "throttle-capacity=4KiB: not a size (unknown suffix 'KiB')" throttle-capacity=4KiB
start_refused_line "throttle-capacity=99999999999999999999: not a size (too large)" \
    throttle-capacity=99999999999999999999
# Every size parameter names itself for a value that is no size.
for p in throttle-capacity throttle-server-capacity throttle-reserve \
         throttle-max-request throttle-writeback-pool throttle-min-capacity; do
  start_refused_line "$p=-1: not a size (negative)" $p=-1
done
start_refused_line "throttle-metric=furlongs: unknown metric: expected bytes, pages, requests or the path of a shared object" \
    throttle-metric=furlongs
start_refused_line "throttle-metric=: empty value: expected bytes, pages, requests or the path of a shared object" \
    throttle-metric=
start_refused "error: throttle-metric=/nonexistent/metric.so: cannot load: /nonexistent/metric.so: " \
    throttle-metric=/nonexistent/metric.so
start_refused_line "throttle-metric=$TEST_NOMETRIC: does not define the symbol throttle_metric" \
    throttle-metric="$TEST_NOMETRIC"
# A boolean: what nbdkit_parse_bool takes, said the same for each.
bool="expected a boolean: true or false (also on/off, yes/no, t/f, y/n, 1/0)"
start_refused_line "throttle-reads=maybe: $bool" throttle-reads=maybe
start_refused_line "throttle-split=maybe: $bool" throttle-split=maybe
for v in true TRUE t yes Y on 1 false f No n OFF 0; do
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M throttle-reads=$v \
    throttle-split=$v --run true >"$tmp/out" 2>&1 ||
    { cat "$tmp/out"; fail "throttle-reads=$v throttle-split=$v refused"; }
done
# A filter key given twice: the first value may be the one meant.
start_refused_line "throttle-capacity=2M: repeats throttle-capacity=1M: give each parameter once" \
    throttle-capacity=1M throttle-capacity=2M
start_refused_line "throttle-swap=auto: repeats throttle-swap=on: give each parameter once" \
    throttle-swap=on throttle-capacity=1M throttle-swap=auto
# A value judged against another names both as written.
start_refused_line "throttle-min-capacity=32M: above 16777216, the default throttle-capacity under throttle-metric=bytes: the floor cannot be above the ceiling" \
    throttle-min-capacity=32M
start_refused_line "throttle-min-capacity=32M: above throttle-capacity=8M: the floor cannot be above the ceiling" \
    throttle-capacity=8M throttle-min-capacity=32M
start_refused_line "throttle-server-capacity=4M: below throttle-capacity=8M: the server-wide bound cannot be below one export's" \
    throttle-capacity=8M throttle-server-capacity=4M
for p in throttle-io-flusher throttle-rt throttle-oom; do
  start_refused "$p=yes: expected auto, on or off" $p=yes
done
start_refused "throttle-swap=yes: expected auto, on (require every guard, for swap) or off (no guard, for ordinary throttling)" \
    throttle-swap=yes
start_refused "throttle-swap=: expected auto, on" throttle-swap=
start_refused "throttle-mlock=all: expected auto, onfault, pool or off" throttle-mlock=all
start_refused_line "throttle-reserve=lots: not a size (not a number)" throttle-reserve=lots
for v in 0 1025 4x -1 0x10 " 4" ""; do
  start_refused_line "throttle-threads=$v: expected a whole number from 1 to 1024 (nbdkit's --threads value)" \
    "throttle-threads=$v"
done
start_refused "throttle-max-request=32K: expected a size from 64K to 32M" \
    throttle-max-request=32K
start_refused "throttle-max-request=64M: expected a size from 64K to 32M" \
    throttle-max-request=64M
start_refused "throttle-max-request=big: not a size" throttle-max-request=big
start_refused_line "throttle-control=: empty value: expected the path of a Unix socket" \
    throttle-control=
start_refused "throttle-control=/$(printf 'x%.0s' $(seq 120)): path too long" \
    throttle-control=/$(printf 'x%.0s' $(seq 120))
start_refused "throttle-mode=writearound: expected writethrough or writeback" \
    throttle-mode=writearound
start_refused "throttle-writeback-pool=0: expected a size greater than 0" \
    throttle-writeback-pool=0
start_refused "throttle-writeback-pool=x: not a size" throttle-writeback-pool=x
start_refused_line "throttle-writeback-threads=0: expected a whole number from 1 to 64" \
    throttle-writeback-threads=0
start_refused_line "throttle-writeback-threads=many: expected a whole number from 1 to 64" \
    throttle-writeback-threads=many
start_refused "throttle-latency-target=fast: expected a duration" \
    throttle-latency-target=fast
start_refused "throttle-min-capacity=0: must be greater than 0" throttle-min-capacity=0
start_refused_line "throttle-min-capacity=lots: not a size (not a number)" throttle-min-capacity=lots
start_refused_line "throttle-capacty=1M: unknown parameter: see nbdkit-throttle-filter(1)" \
    throttle-capacty=1M

# Writeback pools: allocated, touched and locked at the first
# connection, so one that cannot be had is refused at start, naming
# the parameter that sized it.  2^52 pages of 4096 bytes overflow 64
# bits (once to a pool of 0 bytes, once to one buffer); RAM's size
# (anything above half of it) does not fit.
wb="throttle-mode=writeback"
ram=$(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) ))
start_refused_line "throttle-capacity=4503599627370496: 4503599627370496 pages of 4096 bytes overflow a 64-bit writeback pool size: lower throttle-capacity, or set throttle-writeback-pool" \
    $wb throttle-metric=pages throttle-capacity=4503599627370496
start_refused "throttle-capacity=4503599627370497: 4503599627370497 pages of 4096 bytes overflow" \
    $wb throttle-metric=pages throttle-capacity=4503599627370497
start_refused "throttle-capacity=4503599627370495 (the pool's default under throttle-metric=pages .*half of RAM" \
    $wb throttle-metric=pages throttle-capacity=4503599627370495
start_refused "throttle-capacity=$ram (the pool's default under throttle-metric=bytes).*half of RAM" \
    $wb throttle-capacity=$ram
start_refused "throttle-capacity=4611686018427387903 (.*half of RAM" $wb throttle-capacity=4611686018427387903
# Above what a budget's word holds (62 bits), in either mode, at start
# and for the server's bound.
start_refused "throttle-capacity=9223372036854775807: above 4611686018427387903, the largest capacity a budget holds" \
    $wb throttle-capacity=9223372036854775807
start_refused "throttle-capacity=4611686018427387904: above 4611686018427387903, the largest capacity a budget holds" \
    throttle-capacity=4611686018427387904
start_refused "throttle-server-capacity=4611686018427387904: above 4611686018427387903" \
    throttle-server-capacity=4611686018427387904
start_refused "throttle-writeback-pool=$ram: a writeback pool of $ram bytes.*half of RAM" \
    $wb throttle-writeback-pool=$ram
# A pool of its own makes any capacity fine, and so does writethrough.
for ok in "$wb throttle-capacity=$ram throttle-writeback-pool=16M" \
          "throttle-capacity=$ram" \
          "throttle-metric=pages throttle-capacity=4503599627370496"; do
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M $ok --run true \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "refused: $ok"; }
done

# A capacity more than RAM could ever hold in flight (bytes; pages and
# requests: one page each) starts, with a warning saying why; RAM's
# size itself, the most that could be in flight, gets none.  2^50
# bytes, pages or requests exceed any machine this runs on.
big=1125899906842624
for metric in bytes pages requests; do
  for p in throttle-capacity throttle-server-capacity; do
    "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
      throttle-metric=$metric $p=$big --run true >"$tmp/out" 2>&1 ||
      { cat "$tmp/out"; fail "refused: $metric $p=$big"; }
    grep -q "warning: $p=$big: above [0-9]* $metric, the most this machine's RAM ($ram bytes) could hold in flight (.*): this capacity can never be reached, so it never throttles" "$tmp/out" ||
      { cat "$tmp/out"; fail "no warning for $metric $p=$big"; }
  done
done
# The bound itself: one more than RAM's bytes, or its pages, warns.
for c in "throttle-capacity=$(( ram + 1 ))" \
         "throttle-metric=requests throttle-capacity=$(( ram / 4096 + 1 ))"; do
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M $c --run true \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "refused: $c"; }
  grep -q "never throttles" "$tmp/out" ||
    { cat "$tmp/out"; fail "no warning for $c"; }
done
"$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M throttle-capacity=$ram \
  throttle-server-capacity=$ram --run true >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "refused: a capacity of RAM's size"; }
! grep -q "never throttles" "$tmp/out" ||
  { cat "$tmp/out"; fail "a capacity of RAM's size warned"; }
"$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M throttle-metric=pages \
  throttle-capacity=$(( ram / 4096 )) --run true >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "refused: RAM's pages"; }
! grep -q "never throttles" "$tmp/out" ||
  { cat "$tmp/out"; fail "a capacity of RAM's pages warned"; }

# A latency target with reads charged starts, with the one warning the
# filter's page promises: the target protects uncharged reads only
# (nbdkit-throttle-design(1), LATENCY TARGET).  Charged by
# throttle-reads everywhere; by throttle-rt=on where real-time is
# permitted (elsewhere rt=on refuses to start, which test-guards.sh
# checks).  Uncharged, no such warning.
# target_warning ARGS...: the warning lines about the target.
target_warning ()
{
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
    throttle-latency-target=5ms "$@" --run true >"$tmp/out" 2>&1 ||
    { cat "$tmp/out"; fail "refused: throttle-latency-target=5ms $*"; }
  grep 'warning: throttle-latency-target=' "$tmp/out" || :
}
why="a read waits for credit behind writes, on top of the latency the target keeps, so the target cannot keep reads within it; it protects uncharged reads only"
[ "$(target_warning throttle-reads=on throttle-rt=off)" = \
  "nbdkit: throttle: warning: throttle-latency-target=5ms: reads are charged (throttle-reads=on): $why: set throttle-reads=false" ] ||
  { cat "$tmp/out"; fail "throttle-reads=on: not the one warning that the target cannot protect charged reads"; }
if probe_rt; then
  [ "$(target_warning throttle-rt=on)" = \
    "nbdkit: throttle: warning: throttle-latency-target=5ms: reads are charged (throttle-rt=on: real-time request threads charge them): $why: set throttle-rt=off" ] ||
    { cat "$tmp/out"; fail "throttle-rt=on: not the one warning that the target cannot protect charged reads"; }
else
  echo "note: real-time not permitted here: the warning under throttle-rt=on not tested"
fi
[ -z "$(target_warning throttle-rt=off)" ] ||
  { cat "$tmp/out"; fail "uncharged reads: warned about the target"; }
echo "ok: a latency target over charged reads warns once, naming why and the fix"

"$NBDKIT" --filter="$THROTTLE_FILTER" memory --help >"$tmp/help" 2>&1
for p in throttle-capacity throttle-metric throttle-reads throttle-split; do
  grep -q "^$p=" "$tmp/help" || fail "--help does not list $p"
done

# The man page is written by hand: its SYNOPSIS and its PARAMETERS
# items must name exactly the parameters --help lists (config_help is
# the list the filter really takes).
pod=$srcdir/../man/nbdkit-throttle-filter.pod
requires_file "$pod"
grep -o '^throttle-[a-z-]*' "$tmp/help" | sort -u >"$tmp/keys.help"
[ "$(wc -l <"$tmp/keys.help")" -ge 10 ] ||
  { cat "$tmp/help"; fail "--help lists fewer than 10 parameters"; }
section ()
{
  awk -v h="=head1 $1" '$0 == h { p = 1; next } /^=head1 / { p = 0 } p' "$pod"
}
section SYNOPSIS | grep -o 'throttle-[a-z-]*=' | tr -d = | sort -u \
  >"$tmp/keys.synopsis"
section PARAMETERS | sed -n 's/^=item B<\(throttle-[a-z-]*\).*/\1/p' |
  sort -u >"$tmp/keys.parameters"
for part in synopsis parameters; do
  diff "$tmp/keys.help" "$tmp/keys.$part" >"$tmp/keys.diff" ||
    { cat "$tmp/keys.diff"
      fail "man page $part and --help disagree (<: only in --help, >: only in the man page)"; }
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
