#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# run-sanitizers.sh: build the project twice out of tree, with
# --enable-sanitizers=address,undefined and with =thread, run
# 'make check' and 'make check-slow' in each (unit tests and
# integration tests, nbdkit going through nbdkit-sanitized.sh), and
# fail on any test failure or any sanitizer report about our code.
# Both builds check the lock rules (--enable-lock-checks).  .ci/run
# calls this.
#
# Environment: SANITIZER_BUILDS (default "address,undefined thread"),
# SANITIZER_JOBS (make -j, default 2), THROTTLE_SOAK_SECS (the soak
# under sanitizers, default 20), TSAN_SIM_SCHEDULES (schedules of each
# simulation in the TSan build, default 200; see below), KEEP=1 to keep
# the build directories.
# The swap guest suite (in check-slow) skips itself in a sanitizer
# build, and so do the budget's mutants, which test the tests (the
# plain build runs both).

set -uo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builds=${SANITIZER_BUILDS:-address,undefined thread}
jobs=${SANITIZER_JOBS:-2}
export THROTTLE_SOAK_SECS=${THROTTLE_SOAK_SECS:-20}

if [ ! -x "$srcdir/configure" ]; then
  (cd "$srcdir" && autoreconf -fi) || { echo "run-sanitizers: autoreconf failed"; exit 1; }
fi

work=$(mktemp -d /var/tmp/throttle-sanitizers.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

status=0
summary=()
for san in $builds; do
  b=$work/build-${san//,/-}
  mkdir -p "$b"
  start=$(date +%s)
  echo "=== --enable-sanitizers=$san in $b"
  if ! (cd "$b" && "$srcdir/configure" -q --enable-sanitizers="$san" \
          --enable-lock-checks >configure.log 2>&1); then
    cat "$b/configure.log"; echo "run-sanitizers: configure failed ($san)"; exit 1
  fi
  if ! make -C "$b" -j"$jobs" >"$b/make.log" 2>&1; then
    tail -40 "$b/make.log"; echo "run-sanitizers: build failed ($san)"; exit 1
  fi
  # TSan: Check's fork per test is fine (the parent has no threads);
  # CK_FORK=no would let one failing test end the others.
  # check-slow too (one after the other: they share test-suite.log):
  # the soak is where TSan sees the most.
  # The simulations (test-sim, test-budget-sched, test-wbq-sim) are one
  # thread stepping a model through interleavings: TSan, which looks for
  # races between threads, can find none there, and their full runs
  # cost it about 170 s of CPU.  The TSan build runs a few schedules of
  # each (the code under its runtime); the ASan+UBSan build runs them
  # all, as the plain build does, with the lock checks as here.
  simenv=()
  case $san in
    *thread*) simenv=(THROTTLE_SIM_SCHEDULES="${TSAN_SIM_SCHEDULES:-200}"
                      THROTTLE_WBQ_SIM_SCHEDULES="${TSAN_SIM_SCHEDULES:-200}") ;;
  esac
  { env "${simenv[@]}" make -C "$b/tests" -j"$jobs" check &&
      make -C "$b/tests" -j"$jobs" check-slow; } >"$b/check.log" 2>&1
  rc=$?
  grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$b/check.log"
  if [ $rc -ne 0 ]; then
    status=1
    for log in "$b"/tests/*.log; do
      case $log in */test-suite.log) continue ;; esac
      if grep -qE '^(FAIL|ERROR) ' "$log"; then
        echo "--- $log (last 60 lines)"; tail -60 "$log"
      fi
    done
  fi
  # Reports from nbdkit processes a test did not check itself (tests
  # that do not source functions.sh) are only found here.
  if ! "$srcdir/tests/sanitizer-reports.sh" "$b/tests/sanitizer-logs"; then
    echo "run-sanitizers: sanitizer reports about our code ($san)"
    status=1
  fi
  nreports=$(find "$b/tests/sanitizer-logs" -type f ! -name commands 2>/dev/null | wc -l)
  summary+=("$san: make check rc=$rc, $(grep -c '^PASS:' "$b/check.log") passed, $(grep -c '^SKIP:' "$b/check.log") skipped, $nreports report file(s) (see notes above), $(( $(date +%s) - start )) s")
done

echo "=== run-sanitizers summary"
printf '%s\n' "${summary[@]}"
[ $status -eq 0 ] && echo "run-sanitizers: PASS" || echo "run-sanitizers: FAIL"
exit $status
