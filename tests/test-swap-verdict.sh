#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap guest suite's verdicts (tests/swap/check-swap.sh) with a
# stand-in qemu instead of guests: when the control row raw-disk (no
# NBD, no nbdkit, no filter) does not complete, the suite fails saying
# that this machine cannot run the guests, not that the filter hung;
# when raw-disk completes, a MUST row's failure is the filter's.  The
# stand-in plays a machine whose guests never get past the firmware (as
# under this machine kind's nested KVM), and one whose raw-disk guest
# runs the workload while every NBD guest hangs; and, with no time
# budget left at all, the suite still boots every MUST row (a MUST row
# is never skipped for time) and only the recorded rows are left out.
# The rest of the suite is real: the initramfs is built, run-guest.sh
# watches each boot, sends sysrq-t through the monitor and classifies
# the console.
for v in $(compgen -v SWAP_); do
  unset "$v"
done
. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

# stand_in NAME: a qemu-system-x86_64 that opens the monitor pipe as
# qemu does (run-guest.sh writes sysrq-t and quit to it) and prints
# what a guest would: with thr.plugin=raw on the kernel command line
# and NAME raw-ok, the markers of a completed run of the workload;
# else SeaBIOS's last line, then nothing, for ever.
stand_in ()
{
  mkdir -p "$tmp/$1"
  cat > "$tmp/$1/qemu-system-x86_64" <<'EOF'
#!/bin/bash
mon= append=
while [ $# -gt 0 ]; do
  case $1 in
    -monitor) mon=${2#pipe:}; shift ;;
    -append) append=$2; shift ;;
  esac
  shift
done
# Read and written by this process, so neither side's open blocks.
[ -n "$mon" ] && exec 3<>"$mon.in" 4<>"$mon.out"
echo "Probing EDD (edd=off to disable)... ok"
case "$0 $append " in
  */raw-ok/*" thr.plugin=raw "*)
    printf '%s\n' "SWAPTEST-START size_mib=100" "WRITEOUT-DONE 1.0" \
      "WRITEOUT-SWAPPED out_mib=51 in_mib=0" "SWAPIN-DONE 2.0" \
      "SWAPIN-SWAPPED out_mib=102 in_mib=102" "SWAPTEST-EXIT 0" \
      "SWAPSTATS pswpin 65280" "SWAPSTATS pswpout 39168"
    exit 0 ;;
esac
exec sleep 600
EOF
  chmod 755 "$tmp/$1/qemu-system-x86_64"
}
stand_in hang
stand_in raw-ok

# suite STAND-IN [NAME CONFIGS BUDGET]: the suite over CONFIGS (raw-disk
# and one MUST row), one boot each, no boot of a recorded row started
# after BUDGET s (1080), a 4 s stall bound (the stand-in never prints
# again, so the bound decides nothing about speed); its output in
# $tmp/NAME.out (NAME: STAND-IN).  The first run may find that the
# suite cannot run here (no qemu, kernel, busybox...): this test skips
# then; once it ran, a later run's skip is a failure.
may_skip=1
suite ()
{
  local r=0 name=${2:-$1}
  PATH=$tmp/$1:$PATH SWAP_ACCEL=tcg SWAP_CONFIGS="${3:-raw-disk disk-wt-c1}" \
    SWAP_BOOTS=1 SWAP_STALL=4 SWAP_BUDGET=${4:-1080} abs_builddir=$tmp/$name \
    "$srcdir/swap/check-swap.sh" > "$tmp/$name.out" 2>&1 || r=$?
  cat "$tmp/$name.out"
  if [ $may_skip = 1 ] && [ $r = 77 ] &&
     grep -q '^check-swap: SKIP: ' "$tmp/$name.out"; then
    echo "$0: SKIP: the suite cannot run here: $(grep '^check-swap: SKIP: ' "$tmp/$name.out")"
    exit 77
  fi
  may_skip=0
  return $r
}

r=0; suite hang || r=$?
[ $r = 1 ] || fail "no guest boots, but the suite exited $r, not 1"
grep -q '^check-swap: FAIL: this machine cannot run the guests: the control row raw-disk .* did not complete 1 of 1 boots under tcg (stall x1); the MUST rows.* do not judge the filter here$' "$tmp/hang.out" ||
  fail "no guest boots, and the suite did not say that the machine cannot run them"
grep -q '^MACHINE: this machine cannot run the guests' "$tmp/hang.out" ||
  fail "the table does not say, above the MUST rows, that they judge nothing"
grep -q 'cfg=raw-disk .* reason=stall ' "$tmp/hang.out" ||
  fail "raw-disk's boot is not reported as a stall"

r=0; suite raw-ok || r=$?
[ $r = 1 ] || fail "the NBD guest hangs, but the suite exited $r, not 1"
grep -q 'cfg=raw-disk .* status=pass ' "$tmp/raw-ok.out" ||
  fail "the stand-in's raw-disk run did not pass"
grep -q '^disk-wt-c1 .* MUST .* FAIL' "$tmp/raw-ok.out" ||
  fail "the hung MUST row is not FAIL"
grep -q 'machine cannot run\|^MACHINE' "$tmp/raw-ok.out" &&
  fail "raw-disk completed, but the suite blamed the machine"
[ "$(tail -n 1 "$tmp/raw-ok.out")" = "check-swap: FAIL: MUST rows failed: disk-wt-c1 disk-wt-c1(guards); the control row raw-disk completed every boot on this machine, so the failure is the filter's" ] ||
  fail "the suite's last word does not lay the MUST row's failure on the filter"

# No budget left from the start: the MUST row and its control row still
# boot (and the hung MUST row fails, not skips); the recorded row
# filter-file is the one left out.
r=0; suite raw-ok budget "raw-disk disk-wt-c1 filter-file" 0 || r=$?
[ $r = 1 ] || fail "no time budget, a hung MUST row, but the suite exited $r, not 1"
grep -q 'cfg=disk-wt-c1 .* status=fail ' "$tmp/budget.out" ||
  fail "no time budget, and the MUST row disk-wt-c1 was not booted"
grep -q 'cfg=raw-disk .* status=pass ' "$tmp/budget.out" ||
  fail "no time budget, and the control row raw-disk was not booted"
grep -q '^disk-wt-c1 .* MUST .* FAIL' "$tmp/budget.out" ||
  fail "no time budget: the hung MUST row is not FAIL"
grep -q '^filter-file  *recorded *not run (time budget)$' "$tmp/budget.out" ||
  fail "no time budget, but the recorded row filter-file was not left out for it"
grep -q 'cfg=filter-file ' "$tmp/budget.out" &&
  fail "no time budget, but the recorded row filter-file was booted"
grep -q 'SKIP' "$tmp/budget.out" &&
  fail "no time budget: the suite skipped something"
echo "ok: a machine that boots no guest, and a filter row that hangs, told apart; no MUST boot left out for time"
