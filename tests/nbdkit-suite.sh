#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdkit's own tests with the throttle filter in front of every server.
#
# Usage: nbdkit-suite.sh NBDKIT_BUILDDIR [TEST...]
#
# NBDKIT_BUILDDIR is a built nbdkit source tree (./configure && make;
# its tests need not have been run).  THROTTLE_FILTER must be a filter
# built against that same nbdkit.  Each test (default: the subset in
# SUBSET below) runs twice from the tree's tests/ directory, as nbdkit's
# "make check" runs it: once as it is, and once with every nbdkit the
# test starts given --filter=$THROTTLE_FILTER first and
# $THROTTLE_SUITE_ARGS last (default throttle-max-request=plugin).  The
# tree is not modified: the second pass puts a wrapper named nbdkit
# before the tree's own wrapper on PATH.
#
# A difference between the passes (a test's result, or error lines that
# only the filter's run logs: "aborting sleep" from nbdkit_nanosleep, or
# the filter's own "error: throttle") fails this script unless EXPECTED
# lists it with its reason; an expected difference that does not happen
# fails it too, so that the list stays true.  nbdkit-throttle-design(1)
# "NBDKIT'S OWN TESTS" documents the same list.
#
# $NBDKIT_SUITE_JOBS tests (default: the number of CPUs) run at a time.
# Logs go under $NBDKIT_SUITE_OUT (default ./nbdkit-suite): plain/ and
# filter/, one TEST.log each, and summary.txt; the end of the logs of
# each test that fails this script is printed too.  Each pass of a test
# has $NBDKIT_SUITE_TIMEOUT seconds (default 300, as for this project's
# own tests) and running over fails this script, in either pass: a hang
# is a failure, with its log.  It is not a speed check: the subset's
# slowest test took 34 s a pass on a busy 2-core machine.
# Exit status: 0, 1 (a difference, or a broken setup), 2 (usage).

set -u
set -o pipefail

# The subset: nbdkit's tests of what a filter in the chain can change
# (advertised block sizes, parallel requests, flush, FUA and zero,
# extents, export names and lists, shutdown and disconnects), behind the
# plugins and filters the throttle is most often put in front of or
# behind (memory, data, file, nbd, eval, sh, cache, cow).  It runs in
# ./dev.sh check-nbdkit, on CI, where it may take about 4 minutes of
# a 2-core machine for both passes.  The seconds given below are what
# a test's two passes took together on a 2-core machine at load 10 to
# 15 (two tests at a time).
SUBSET="
test-block-size-constraints test-blocksize-default test-blocksize-policy
test-nbd-block-size test-blocksize-write-disconnect test-blocksize
test-blocksize-policy-extents test-blocksize-extents-overflow
test-cache test-cache-on-read test-cache-unaligned test-cache-block-size
test-cache-max-size test-cow-extents1 test-cow-extents-large
test-data-raw test-data-base64 test-data-7E test-data-file
test-data-random-slice test-data-raw-copy
test-delay-shutdown test-disconnect test-shutdown
test-zero test-flush test-fua test-fua-flush-on-close test-retry-zero-flags
test-export-info test-export-name test-multi-conn-name
test-eval-extents test-crippled-extents test-split-extents
test-retry-extents
test-file test-file-size test-file-fd test-file-dirfd
test-memory-allocator-malloc test-memory-allocator-malloc-mlock
test-memory-largest test-memory-largest-for-qemu
test-nbd-dynamic-content test-nbd-dynamic-list
test-parallel-file test-parallel-nbd test-parallel-sh
"
# Left out, each for its reason (any of them can still be named on the
# command line):
# - too slow for CI, and not about what the filter changes:
#   test-multi-conn (over 300 s), test-data-format (89 servers; not done
#   in 300 s), test-eflags (153 s; dozens of servers and qemu-nbd runs),
#   test-eval-disconnect (101 s), test-eval-cache (50 s),
#   test-nozero (54 s: the nozero filter's modes; test-zero stays);
# - an inner filter's or plugin's own workings, timed by sleeps or
#   parsing only: test-blocksize-sharding (49 s), test-blocksize-error-policy
#   (39 s), test-blocksize-extents (34 s), test-cache-on-read-caches and
#   test-cow-on-read-caches (26 and 28 s, delay filter), test-cacheextents
#   (31 s), test-swab-extents (38 s), and the data plugin's parser:
#   test-data-bad, -optimum, -size (about 40 s each), -64b, -partition,
#   -random-slice2, -reloffset, -sectors;
# - need jq, which ./dev.sh does not install (they would only skip):
#   test-eval-exports, test-exportname, test-file-dir, test-extentlist,
#   test-null-extents, test-offset-extents, test-sh-extents,
#   test-truncate-extents, test-data-extents, test-nbd-extents;
# - skip on every machine ./dev.sh sets up: test-cow-block-size,
#   test-cow-extents2, test-eval-file, test-file-extents (the "disk"
#   image needs the linuxdisk plugin or guestfish),
#   test-file-cache-none-* (the same, or cachestats), test-file-readonly
#   (as root);
# - test-nbd-client needs a kernel NBD device (fails in both passes
#   without one).

# Differences from the plain run that are the filter's documented
# behaviour, one per line: TEST KIND REASON, KIND "result" (the test's
# result differs) or "log" (error lines only the filter's run has).
# With throttle-max-request=plugin there are none.  Without it the
# filter advertises its own maximum block size (4M by default, whatever
# the plugin allows) and refuses larger reads and writes with EINVAL
# itself, so the tests that check what the plugin or an inner filter
# advertises or does with a larger request see the filter's instead.
expected ()
{
  case " $THROTTLE_SUITE_ARGS " in
    *" throttle-max-request=plugin "*) ;;
    *)
      local why="the maximum block size advertised is throttle-max-request (4M by default), not the plugin's"
      cat <<EOF
test-block-size-constraints result $why
test-blocksize-default result $why
test-blocksize-policy result $why
test-nbd-block-size result $why
test-blocksize-write-disconnect result $why; a write larger than throttle-max-request is refused with EINVAL by the filter, before an inner blocksize-policy filter could refuse it its way
test-blocksize-write-disconnect log the filter's error line for the write it refuses as larger than throttle-max-request
EOF
      ;;
  esac
}

nbdkit_builddir=${1:-}
if [ -z "$nbdkit_builddir" ]; then
  echo "usage: $0 NBDKIT_BUILDDIR [TEST...] (make check-nbdkit-suite NBDKIT_SRCDIR=DIR)" >&2
  exit 2
fi
shift
nbdkit_builddir=$(cd "$nbdkit_builddir" && pwd) || exit 1
: "${THROTTLE_SUITE_ARGS=throttle-max-request=plugin}"
: "${NBDKIT_SUITE_OUT:=$PWD/nbdkit-suite}"
: "${NBDKIT_SUITE_TIMEOUT:=300}"
: "${NBDKIT_SUITE_JOBS:=$(nproc)}"
tests=${*:-$SUBSET}

die ()
{
  echo "$0: $*" >&2
  exit 1
}

[ -x "$nbdkit_builddir/nbdkit" ] && [ -f "$nbdkit_builddir/tests/functions.sh" ] ||
  die "$nbdkit_builddir is not a built nbdkit source tree (no ./nbdkit wrapper or tests/functions.sh)"
[ -n "${THROTTLE_FILTER:-}" ] && [ -f "$THROTTLE_FILTER" ] ||
  die "THROTTLE_FILTER (${THROTTLE_FILTER:-unset}) is not a built filter"
# A filter loads only into the nbdkit whose headers built it: say so
# once here rather than in every test's log.
if ! out=$("$nbdkit_builddir/nbdkit" --filter="$THROTTLE_FILTER" null \
             $THROTTLE_SUITE_ARGS --run true 2>&1); then
  die "$THROTTLE_FILTER does not load into $nbdkit_builddir/nbdkit (build the filter against that nbdkit: ../configure NBDKIT=... PKG_CONFIG_PATH=...): $out"
fi

rm -rf "$NBDKIT_SUITE_OUT"
mkdir -p "$NBDKIT_SUITE_OUT/plain" "$NBDKIT_SUITE_OUT/filter" \
  "$NBDKIT_SUITE_OUT/wrap" || exit 1
# Word splitting of THROTTLE_SUITE_ARGS is wanted: one parameter each.
cat >"$NBDKIT_SUITE_OUT/wrap/nbdkit" <<EOF
#!/bin/sh
# The key=value parameters go last: nbdkit's wrapper hands them to the
# server after the plugin's, and a plugin's magic first parameter stays
# first.
exec "$nbdkit_builddir/nbdkit" --filter="$THROTTLE_FILTER" "\$@" $THROTTLE_SUITE_ARGS
EOF
chmod +x "$NBDKIT_SUITE_OUT/wrap/nbdkit"
# nbdsh runs the python3 first on PATH, which must have libnbd's
# module: Debian's has it, a python3 installed by hand may not.
mkdir -p "$NBDKIT_SUITE_OUT/python" || exit 1
if ! python3 -c 'import nbd' 2>/dev/null &&
   /usr/bin/python3 -c 'import nbd' 2>/dev/null; then
  ln -s /usr/bin/python3 "$NBDKIT_SUITE_OUT/python/python3"
fi

# What nbdkit's tests/Makefile gives each test (TESTS_ENVIRONMENT,
# automake's srcdir), with glibc's malloc checking as there but one
# perturbation byte for both passes instead of a random one.
malloc_check=()
if [ -e /usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0 ] ||
   ldconfig -p 2>/dev/null | grep -q libc_malloc_debug.so.0; then
  malloc_check=(LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}libc_malloc_debug.so.0"
                GLIBC_TUNABLES=glibc.malloc.check=1:glibc.malloc.perturb=165)
fi

# Runs TEST in PASS; its result (PASS, SKIP, TIMEOUT, FAIL) and time go
# to PASS/TEST.result.
run_one ()
{
  local pass=$1 t=$2 path=$nbdkit_builddir:$NBDKIT_SUITE_OUT/python:$PATH r t0
  [ "$pass" = filter ] && path=$NBDKIT_SUITE_OUT/wrap:$path
  t0=$(date +%s)
  (cd "$nbdkit_builddir/tests" &&
     exec env LIBNBD_DEBUG=1 "${malloc_check[@]}" srcdir=. PATH="$path" \
       timeout -k 10 "$NBDKIT_SUITE_TIMEOUT" "./$t.sh" \
       </dev/null >"$NBDKIT_SUITE_OUT/$pass/$t.log" 2>&1)
  case $? in
    0) r=PASS ;;
    77) r=SKIP ;;
    124|137) r=TIMEOUT ;;
    *) r=FAIL ;;
  esac
  echo "$r $(( $(date +%s) - t0 ))" >"$NBDKIT_SUITE_OUT/$pass/$t.result"
  echo "$pass $t $r ($(( $(date +%s) - t0 )) s)"
}

# Error lines of a log that the filter can add: nbdkit_nanosleep's
# "aborting sleep" and the filter's own.
errors ()
{
  grep -E 'error: (aborting sleep|throttle)' "$1" 2>/dev/null | wc -l
}

for t in $tests; do
  [ -f "$nbdkit_builddir/tests/${t%.sh}.sh" ] || die "no test ${t%.sh}.sh in $nbdkit_builddir/tests"
done

# NBDKIT_SUITE_JOBS tests at a time, as nbdkit's "make -j check" runs
# them: each test names its files after itself, so different tests do
# not collide, but a test must not run beside itself: its two passes
# run one after the other.
start=$(date +%s)
running=0
for t in $tests; do
  if [ "$running" -ge "$NBDKIT_SUITE_JOBS" ]; then
    wait -n
    running=$((running - 1))
  fi
  (run_one plain "${t%.sh}"; run_one filter "${t%.sh}") &
  running=$((running + 1))
done
wait

declare -A result
for pass in plain filter; do
  for t in $tests; do
    t=${t%.sh}
    read -r result[$pass.$t] _ <"$NBDKIT_SUITE_OUT/$pass/$t.result" ||
      result[$pass.$t]=FAIL
  done
done

summary=$NBDKIT_SUITE_OUT/summary.txt
diffs=$NBDKIT_SUITE_OUT/differences.txt
: >"$diffs"
for t in $tests; do
  t=${t%.sh}
  p=${result[plain.$t]} f=${result[filter.$t]}
  [ "$p" = "$f" ] || echo "$t result plain $p, filter $f" >>"$diffs"
  pe=$(errors "$NBDKIT_SUITE_OUT/plain/$t.log")
  fe=$(errors "$NBDKIT_SUITE_OUT/filter/$t.log")
  [ "$fe" -le "$pe" ] ||
    echo "$t log $fe error lines from nanosleep or the filter, $pe without it" >>"$diffs"
done

count ()
{
  local pass=$1 what=$2 t n=0
  for t in $tests; do
    [ "${result[$pass.${t%.sh}]}" = "$what" ] && n=$((n + 1))
  done
  echo $n
}

{
  echo "nbdkit: $("$nbdkit_builddir/nbdkit" --version)"
  echo "filter: $THROTTLE_FILTER $THROTTLE_SUITE_ARGS"
  for pass in plain filter; do
    echo "$pass: $(count $pass PASS) pass, $(count $pass FAIL) fail," \
         "$(count $pass TIMEOUT) timeout, $(count $pass SKIP) skip" \
         "of $(echo $tests | wc -w)"
  done
  echo "time: $(( $(date +%s) - start )) s"
} >"$summary"

rc=0
bad=
expected >"$NBDKIT_SUITE_OUT/expected.txt"
while read -r t kind rest; do
  if grep -q "^$t $kind " "$NBDKIT_SUITE_OUT/expected.txt"; then
    echo "expected difference: $t $kind $rest ($(grep "^$t $kind " "$NBDKIT_SUITE_OUT/expected.txt" | cut -d' ' -f3-))"
  else
    echo "UNEXPECTED difference: $t $kind $rest (logs: $NBDKIT_SUITE_OUT/{plain,filter}/$t.log)"
    rc=1
    bad="$bad $t"
  fi
done <"$diffs" >>"$summary"
while read -r t kind why; do
  case " $tests " in *" $t "*|*" $t.sh "*) ;; *) continue ;; esac
  if ! grep -q "^$t $kind " "$diffs"; then
    echo "EXPECTED difference did not happen: $t $kind ($why): correct the list"
    rc=1
    bad="$bad $t"
  fi
done <"$NBDKIT_SUITE_OUT/expected.txt" >>"$summary"
# A hang fails even where both passes hang alike.
for t in $tests; do
  t=${t%.sh}
  for pass in plain filter; do
    [ "${result[$pass.$t]}" = TIMEOUT ] || continue
    echo "TIMEOUT: $t ($pass) still running after $NBDKIT_SUITE_TIMEOUT s (log: $NBDKIT_SUITE_OUT/$pass/$t.log)"
    rc=1
    bad="$bad $t"
  done
done >>"$summary"
cat "$summary"
# What went wrong, in the output itself (a CI log may be all there is).
for t in $(echo $bad | tr ' ' '\n' | sort -u); do
  for pass in plain filter; do
    echo "---- $pass/$t.log (last 40 lines)"
    tail -n 40 "$NBDKIT_SUITE_OUT/$pass/$t.log"
  done
done
exit $rc
