#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The budget's schedules (test-budget-sched.c) can fail: each mutant
# of lib/throttle-budget.c that tests/Makefile.am builds breaks one of
# the promises of the fast path or of mirroring, and the schedules must find it, with the
# check that names that promise and a seed that replays it.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
# The mutants test the schedules and the stress, not the code that
# ships: the plain build runs them; a sanitizer build does not build
# them (tests/Makefile.am).
case ${SANITIZERS:-no} in
  no|"") ;;
  *) echo "$0: SKIP: a build with --enable-sanitizers=$SANITIZERS: the mutants test the tests, and run in the plain build"
     exit 77 ;;
esac

# mutant  what its failure must say
mutants=(
  "budget-mutant-wait|by the fast path past"   # FIFO: admitted past waiters
  "budget-mutant-seq|over the capacity"        # the bound, after a capacity change
  "budget-mutant-grant|the head is stranded"   # a lost wake-up
  "budget-mutant-mirror|held or owed"          # the server keeps units
  "budget-mutant-putback|held or owed"         # the server keeps units
  "budget-mutant-fits|over the capacity"       # the bound
  "budget-mutant-charge|held or owed"          # the server short
)
for m in "${mutants[@]}"; do
  prog=${m%%|*} want=${m#*|}
  [ -x "./$prog" ] || fail "$prog: not built"
  # Check's fork mode would report the failure as the child's; the
  # message is on stderr either way.
  if THROTTLE_SIM_SCHEDULES=20000 "./$prog" >"$tmp/$prog.out" 2>&1; then
    cat "$tmp/$prog.out" >&2
    fail "$prog: 20000 schedules passed: the schedules miss this mutation"
  fi
  grep -q -- "$want" "$tmp/$prog.out" ||
    { cat "$tmp/$prog.out" >&2; fail "$prog: failed, but not with '$want'"; }
  seed=$(sed -n 's/.*schedule of seed \([0-9]*\) failed.*/\1/p' "$tmp/$prog.out" | head -n 1)
  [ -n "$seed" ] || { cat "$tmp/$prog.out" >&2; fail "$prog: no seed printed"; }
  # The seed replays the failure.
  if THROTTLE_SIM_SEED=$seed "./$prog" >"$tmp/$prog.replay" 2>&1 ||
     ! grep -q -- "$want" "$tmp/$prog.replay"; then
    cat "$tmp/$prog.replay" >&2
    fail "$prog: seed $seed does not replay the failure"
  fi
  echo "$prog: caught at seed $seed: $(grep -m1 -- "$want" "$tmp/$prog.out")"
done

# The real-thread stress (test-budget-threads.c, test_stress) must fail
# against mutants of the fast path and of mirroring too, each for the
# reason named; its watchdog waits 5 s here, not the default 60.
thread_mutants=(
  "budget-threads-mutant-grant|stalled"           # a lost wake-up
  "budget-threads-mutant-fits|over the capacity"  # the bound
  "budget-threads-mutant-charge|aborted in the budget"  # server short
)
for m in "${thread_mutants[@]}"; do
  prog=${m%%|*} want=${m#*|}
  [ -x "./$prog" ] || fail "$prog: not built"
  if CK_RUN_CASE=stress THROTTLE_STALL_S=5 "./$prog" >"$tmp/$prog.out" 2>&1
  then
    cat "$tmp/$prog.out" >&2
    fail "$prog: the stress passed: it misses this mutation"
  fi
  grep -q -- "$want" "$tmp/$prog.out" ||
    { cat "$tmp/$prog.out" >&2; fail "$prog: failed, but not with '$want'"; }
  echo "$prog: caught: $(grep -m1 -- "$want" "$tmp/$prog.out")"
done
pass
