#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap guest suite's verdicts (tests/swap/check-swap.sh) with a
# stand-in qemu instead of guests: when the control row raw-disk (no
# NBD, no nbdkit, no filter) does not complete, the suite fails saying
# that this machine cannot run the guests, not that the filter hung;
# when raw-disk completes, a MUST row's failure is the filter's.  The
# stand-in plays a machine whose guests never get past the firmware (as
# under this machine kind's nested KVM), and one whose raw-disk guest
# runs the workload while every NBD guest hangs.  The rest of the suite
# is real: the initramfs is built, run-guest.sh watches each boot, sends
# sysrq-t through the monitor and classifies the console.
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

# suite STAND-IN: the suite over raw-disk and one MUST row, one boot
# each, a 4 s stall bound (the stand-in never prints again, so the
# bound decides nothing about speed); its output in $tmp/STAND-IN.out.
suite ()
{
  local r=0
  PATH=$tmp/$1:$PATH SWAP_ACCEL=tcg SWAP_CONFIGS="raw-disk disk-wt-c1" \
    SWAP_BOOTS=1 SWAP_STALL=4 abs_builddir=$tmp/$1 \
    "$srcdir/swap/check-swap.sh" > "$tmp/$1.out" 2>&1 || r=$?
  cat "$tmp/$1.out"
  if [ $r = 77 ] && grep -q '^check-swap: SKIP: ' "$tmp/$1.out"; then
    echo "$0: SKIP: the suite cannot run here: $(grep '^check-swap: SKIP: ' "$tmp/$1.out")"
    exit 77
  fi
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
echo "ok: a machine that boots no guest, and a filter row that hangs, told apart"
