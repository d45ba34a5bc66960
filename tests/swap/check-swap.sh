#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap-over-NBD guest suite (make check-swap).  See README.md.
#
# Boots every configuration of common.sh the number of times it lists,
# two guests at a time, and prints a table.  Exits 1 when the control
# row raw-disk did not complete a boot (this machine cannot run the
# guests: said so, and the MUST rows judge nothing), or when a MUST
# configuration (the throttle filter over the disk plugin at defaults)
# failed a boot or could not run, 77 when the machine cannot boot a
# guest, 0 otherwise.  The other configurations are recorded, never
# fail.  Every MUST boot runs, however long the suite has taken: a MUST
# row that was not booted would be a skip of what the suite is for, and
# failing it for the time the machine took would make the verdict
# depend on the machine's speed.  Each boot is bounded by run-guest.sh
# (SWAP_TIMEOUT, SWAP_STALL, SWAP_STUCK), so the suite is too.
#
# Environment: THROTTLE_FILTER, THROTTLE_DISK_PLUGIN (the built .so files),
# THROTTLE_SWAP_UNIT, THROTTLE_SWAP_HELPER (the built unit and helper),
# abs_builddir (the work directory goes under it),
# THROTTLE_SWAP_ALLOW_MISSING=1 (development: run what can run when the
# filter or the disk plugin is not built, without failing),
# SWAP_CONFIGS (names to run, default all), SWAP_BOOTS (boots per config,
# overrides the table), SWAP_JOBS (guests at a time, 2),
# SWAP_BUDGET (seconds after which no recorded boot starts, 1080; MUST
# boots and raw-disk's always start),
# SWAP_RECORDED=0 (boot only the MUST configurations and their control
# row raw-disk, as CI does: the other recorded rows cannot fail),
# SWAP_BUNDLE (a directory made by bundle.sh: its initramfs, kernel and
# swaptest, none of the host's; DIR/run sets it),
# and the SWAP_* variables of run-guest.sh.

set -uo pipefail

srcdir=$(cd "$(dirname "$0")" && pwd)
. "$srcdir/common.sh"

skip () { echo "check-swap: SKIP: $*"; exit 77; }

command -v qemu-system-x86_64 >/dev/null ||
    skip "qemu-system-x86_64 not installed (Debian: qemu-system-x86)"
if [ -n "${SWAP_BUNDLE:-}" ]; then
    # Everything the guest needs was built into the bundle elsewhere.
    [ -f "$SWAP_BUNDLE/bundle.conf" ] || { echo "check-swap: FAIL: $SWAP_BUNDLE is not a bundle (no bundle.conf)"; exit 1; }
    . "$SWAP_BUNDLE/bundle.conf"
    export SWAP_KERNEL=$SWAP_BUNDLE/$BUNDLE_KERNEL
    echo "check-swap: bundle $SWAP_BUNDLE: $BUNDLE_NBDKIT, kernel $BUNDLE_KERNEL, made $BUNDLE_MADE"
else
[ -n "$(swap_kernel)" ] || skip "no /boot/vmlinuz-* (Debian: linux-image-amd64)"
[ -f "/lib/modules/$(swap_kernel_version)/modules.dep" ] ||
    skip "no modules for $(swap_kernel) (Debian: linux-image-amd64)"
command -v busybox >/dev/null &&
    grep -q 'not a dynamic executable' <<< "$(LC_ALL=C ldd "$(command -v busybox)" 2>&1)" ||
    skip "no static busybox (Debian: busybox-static)"
command -v nbd-client >/dev/null || [ -x /usr/sbin/nbd-client ] ||
    skip "nbd-client not installed (Debian: nbd-client)"
command -v nbdkit >/dev/null || skip "nbdkit not installed"
case "${SANITIZERS:-no}" in
    no|"") ;;
    # A sanitized filter needs its runtime preloaded into nbdkit, and its
    # shadow memory does not fit a 192 MiB guest: this suite judges the
    # build that users run.
    *) skip "a build with --enable-sanitizers=$SANITIZERS; run it in a plain build" ;;
esac
echo 'int main(void){return 0;}' | gcc -static -x c -o /dev/null - 2>/dev/null ||
    skip "gcc cannot link statically (Debian: libc6-dev)"
fi

missing=
[ -n "${THROTTLE_FILTER:-}" ] && [ -f "$THROTTLE_FILTER" ] ||
    missing="$missing throttle filter (THROTTLE_FILTER=${THROTTLE_FILTER:-unset});"
[ -n "${THROTTLE_DISK_PLUGIN:-}" ] && [ -f "$THROTTLE_DISK_PLUGIN" ] ||
    missing="$missing disk plugin (THROTTLE_DISK_PLUGIN=${THROTTLE_DISK_PLUGIN:-unset});"
have_filter=0; [ -n "${THROTTLE_FILTER:-}" ] && [ -f "$THROTTLE_FILTER" ] && have_filter=1
have_disk=0; [ -n "${THROTTLE_DISK_PLUGIN:-}" ] && [ -f "$THROTTLE_DISK_PLUGIN" ] && have_disk=1
have_units=0
[ -n "${THROTTLE_SWAP_UNIT:-}" ] && [ -f "$THROTTLE_SWAP_UNIT" ] &&
    [ -n "${THROTTLE_SWAP_HELPER:-}" ] && [ -f "$THROTTLE_SWAP_HELPER" ] && have_units=1
[ $have_units = 1 ] ||
    missing="$missing swap unit and helper (THROTTLE_SWAP_UNIT=${THROTTLE_SWAP_UNIT:-unset}, THROTTLE_SWAP_HELPER=${THROTTLE_SWAP_HELPER:-unset});"
if [ -n "${SWAP_BUNDLE:-}" ]; then
    have_filter=$BUNDLE_FILTER have_disk=$BUNDLE_DISK have_units=$BUNDLE_UNITS
    missing=
    [ "$have_filter" = 1 ] || missing="$missing throttle filter (not in the bundle);"
    [ "$have_disk" = 1 ] || missing="$missing disk plugin (not in the bundle);"
    [ "$have_units" = 1 ] || missing="$missing swap unit and helper (not in the bundle);"
fi
work=${abs_builddir:-$PWD}/swap-work
rm -rf "$work"
mkdir -p "$work"
if [ -n "${SWAP_BUNDLE:-}" ]; then
    cp "$SWAP_BUNDLE/initramfs.cpio.gz" "$SWAP_BUNDLE/initramfs-nbd.cpio.gz" "$SWAP_BUNDLE/relay" "$work/"
    st=$SWAP_BUNDLE/swaptest
else
    "$srcdir/build-initramfs.sh" "$work" || { echo "check-swap: FAIL: cannot build the initramfs"; exit 1; }
    st=$work/root/usr/bin/swaptest
fi

# Once for every boot: the canary boot of swap_accel needs the initramfs.
accel_line=$(swap_accel "$(swap_kernel)" "$work/initramfs.cpio.gz") ||
    { echo "check-swap: FAIL: $accel_line"; exit 1; }
accel=${accel_line%% *}
echo "check-swap: guests run under $accel (${accel_line#* })"

# The workload's verifier must be able to fail: on the host, a clean run
# passes and a run with one damaged word reports exactly that page.
good=$("$st" 8); good_rc=$?
bad=$(SWAPTEST_CORRUPT_PAGE=100 "$st" 8); bad_rc=$?
if [ $good_rc != 0 ] || ! grep -q "^SWAPIN-DONE" <<< "$good" ||
   [ $bad_rc != 1 ] || grep -q "^SWAPIN-DONE" <<< "$bad" ||
   ! grep -q "^VERIFY-FAILED page=100 " <<< "$bad"; then
    echo "check-swap: FAIL: swaptest's self-test on the host failed"
    exit 1
fi

# --- the jobs: MUST boots first, then the recorded ones, round robin -----
configs=${SWAP_CONFIGS:-$(swap_configs | awk '{ print $1 }')}
if [ "${SWAP_RECORDED:-1}" = 0 ]; then
    configs=$(for c in $configs; do
                  # An unknown name stays, to be refused below.
                  must=$(swap_config "$c" must) || must=1
                  [ "$must" = 1 ] || [ "$c" = raw-disk ] && echo "$c"
              done)
    echo "check-swap: SWAP_RECORDED=0: the recorded configurations other than raw-disk are not booted"
fi
unrunnable=
jobs_must=() jobs_rec=()
maxboots=0
for c in $configs; do
    args=$(swap_config "$c" args) || { echo "check-swap: unknown config $c"; exit 1; }
    boots=${SWAP_BOOTS:-$(swap_config "$c" boots)}
    [ "$boots" -gt "$maxboots" ] && maxboots=$boots
done
for ((b = 1; b <= maxboots; b++)); do
    for c in $configs; do
        args=$(swap_config "$c" args)
        boots=${SWAP_BOOTS:-$(swap_config "$c" boots)}
        [ $b -le "$boots" ] || continue
        case " $args " in
            *" thr.plugin=disk "*) [ $have_disk = 1 ] || { unrunnable="$unrunnable $c"; continue; } ;;
        esac
        case " $args " in
            *" thr.filter=1 "*) [ $have_filter = 1 ] || { unrunnable="$unrunnable $c"; continue; } ;;
        esac
        case " $args " in
            *" thr.units=1 "*) [ $have_units = 1 ] || { unrunnable="$unrunnable $c"; continue; } ;;
        esac
        # The control row boots among the MUST rows, round by round, so
        # that the ratios to it compare boots that shared the machine's load.
        if [ "$(swap_config "$c" must)" = 1 ] || [ "$c" = raw-disk ]; then
            jobs_must+=("$c $b")
        else
            jobs_rec+=("$c $b")
        fi
    done
done
unrunnable=$(echo $unrunnable | tr ' ' '\n' | sort -u | tr '\n' ' ')

results=$work/results
: > "$results"
start=$(date +%s)
# No recorded boot starts after the budget: they judge nothing, and
# they come after the MUST boots, which always start (see the top).
budget=${SWAP_BUDGET:-1080}
njobs=${SWAP_JOBS:-2}
running=0
# Each boot in its own process group (set -m), so that an interrupted
# suite stops its guests: run-guest.sh kills its qemu when it exits.
set -m
trap 'for p in $(jobs -p); do kill -- -$p; done 2>/dev/null; wait; exit 130' INT TERM
skipped=0

run_one ()
{
    local c=$1 b=$2 line
    line=$("$srcdir/run-guest.sh" -w "$work" -n "$b" -a "$accel" "$c" 2>&1 | grep '^RESULT')
    [ -n "$line" ] || line="RESULT cfg=$c boot=$b status=fail writeout=0 swapin=0 hung=0 reason=harness-error log=-"
    echo "$line" >> "$results"
    echo "check-swap: $(( $(date +%s) - start )) s: ${line#RESULT }"
}

recorded=0
for job in "${jobs_must[@]}" -- "${jobs_rec[@]}"; do
    [ "$job" = -- ] && { recorded=1; continue; }
    if [ $running -ge "$njobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    if [ $recorded = 1 ] && [ $(( $(date +%s) - start )) -ge "$budget" ]; then
        skipped=$((skipped + 1))
        continue
    fi
    run_one $job &
    running=$((running + 1))
done
wait
elapsed=$(( $(date +%s) - start ))

# --- the table -------------------------------------------------------------
field () { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
clean () { tr -d '\r' | sed 's/\x1b\[[0-9;]*m//g'; }
median ()
{
    sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
                    else if (NR % 2) print v[(NR + 1) / 2];
                    else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo
echo "Swap over NBD, $(swap_kernel_version), $SWAP_MEM MiB guest, workload $SWAP_SIZE_MIB MiB in $SWAP_AVAIL_MIB MiB available, $elapsed s"
# Each configuration's median times also as a ratio to the control
# row's (raw-disk: swap on the virtio disk itself, the same workload).
# Times count only from boots that swapped what the workload must
# (run-guest.sh): one that swapped less would look fast.
timed () { grep " cfg=$1 " "$results" | grep -v ' reason=swap-volume'; }
raw_wo=$(timed raw-disk | field wo | grep -v '^-$' | median)
raw_si=$(timed raw-disk | field si | grep -v '^-$' | median)
raw_tot=$(timed raw-disk | field total | grep -v '^-$' | median)
ratio () { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'; }
echo "guests under $accel: ${accel_line#* }"
# The control row decides whether the table can judge the filter at
# all: raw-disk swaps on the virtio disk itself, with no NBD, no nbdkit
# and no filter, so a raw-disk boot that does not complete means that
# this machine cannot run the guests (an accelerator that hangs, a host
# too loaded for the guests' timers), and a MUST row's failure beside it
# says nothing about the filter.
raw_rows=$(grep " cfg=raw-disk " "$results")
raw_n=$(printf '%s' "$raw_rows" | grep -c . || true)
raw_bad=$(printf '%s\n' "$raw_rows" | grep -c ' status=fail ' || true)
machine=
if [ "$raw_bad" -gt 0 ]; then
    machine="this machine cannot run the guests: the control row raw-disk (swap on the virtio disk: no NBD, no nbdkit, no filter) did not complete $raw_bad of $raw_n boots under $accel ($(printf '%s\n' "$raw_rows" | grep ' status=fail ' | field reason | sort | uniq -c | awk '{ printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1 }'))"
    echo "MACHINE: $machine; the MUST rows below do not judge the filter"
fi
printf '%-34s %-8s %5s %8s %8s %5s %6s %9s %9s %9s %5s %5s %5s\n' \
    configuration kind boots writeout swap-in hung other "wo-med-s" "si-med-s" "tot-med-s" wo-x si-x tot-x
fail=0
failed_must=
notrun_must=0
failed_logs=
for c in $configs; do
    must=$(swap_config "$c" must)
    args=$(swap_config "$c" args)
    kind=recorded; [ "$must" = 1 ] && kind=MUST
    rows=$(grep " cfg=$c " "$results")
    n=$(printf '%s' "$rows" | grep -c . || true)
    if [ "$n" = 0 ]; then
        if echo " $unrunnable " | grep -q " $c "; then
            # Whether this fails the suite is decided below, with
            # THROTTLE_SWAP_ALLOW_MISSING.
            printf '%-34s %-8s %s\n' "$c" "$kind" "could not run:$missing"
        else
            if [ "$must" = 1 ]; then
                printf '%-34s %-8s %s\n' "$c" "$kind" "FAIL (not run)"
                notrun_must=$((notrun_must + ${SWAP_BOOTS:-$(swap_config "$c" boots)}))
            else
                printf '%-34s %-8s %s\n' "$c" "$kind" "not run (time budget)"
            fi
        fi
        continue
    fi
    wo=$(printf '%s\n' "$rows" | grep -c ' writeout=1 ' || true)
    si=$(printf '%s\n' "$rows" | grep -c ' swapin=1 ' || true)
    hung=$(printf '%s\n' "$rows" | grep -c ' hung=1 ' || true)
    other=$(printf '%s\n' "$rows" | grep -v ' reason=ok ' | grep -vc ' hung=1 ' || true)
    wom=$(timed "$c" | field wo | grep -v '^-$' | median)
    sim=$(timed "$c" | field si | grep -v '^-$' | median)
    totm=$(timed "$c" | field total | grep -v '^-$' | median)
    # Both phases completed, verified and really swapped; the guards have
    # their own line below.
    passed=$(printf '%s\n' "$rows" | grep -c ' reason=ok ' || true)
    wanted=${SWAP_BOOTS:-$(swap_config "$c" boots)}
    verdict=
    if [ "$must" = 1 ]; then
        # Every MUST boot starts (see the top): one that did not run
        # fails the row, as a failed boot would.
        if [ "$passed" = "$n" ] && [ "$n" -ge "$wanted" ]; then verdict=PASS; else verdict=FAIL; fi
        [ "$passed" = "$n" ] || { fail=1; failed_must="$failed_must $c"; }
        if [ "$n" -lt "$wanted" ]; then
            verdict="$verdict ($((wanted - n)) of $wanted boots not run)"
            notrun_must=$((notrun_must + wanted - n))
        fi
    fi
    printf '%-34s %-8s %5s %8s %8s %5s %6s %9s %9s %9s %5s %5s %5s %s\n' \
        "$c" "$kind" "$n" "$wo" "$si" "$hung" "$other" "$wom" "$sim" "$totm" \
        "$(ratio "$wom" "$raw_wo")" "$(ratio "$sim" "$raw_si")" \
        "$(ratio "$totm" "$raw_tot")" "$verdict"
    gv=
    case " $args " in
        *" thr.guards=1 "*)
            # Boots whose every nbdkit thread had PF_MEMALLOC_NOIO and
            # PF_LOCAL_THROTTLE with VmLck > 0 and SCHED_FIFO (from before
            # the first swap-out, else rt-late): after the workload, or
            # before it when the guest hung (ok-pre, which cannot pass).
            gok=$(printf '%s\n' "$rows" | grep -c ' guards=ok ' || true)
            gpre=$(printf '%s\n' "$rows" | grep -c ' guards=ok-pre ' || true)
            gv=
            if [ "$must" = 1 ]; then
                if [ "$gok" = "$n" ]; then gv=PASS; else gv=FAIL; fail=1; failed_must="$failed_must $c(guards)"; fi
            fi
            printf '%-34s %-8s %5s %8s %s\n' "  guards(noio,throttle,vmlck,rt)" \
                "$kind" "$n" "ok=$gok" "ok-before-hang=$gpre $gv"
            ;;
    esac
    if [ "$must" = 1 ] && { [ "${verdict%% *}" = FAIL ] || [ "$gv" = FAIL ]; }; then
        # The first failed boot of each configuration is printed; the
        # others are in the per-boot lines.
        failed_logs="$failed_logs $(printf '%s\n' "$rows" | grep ' status=fail ' | field log | head -n 1)"
    fi
done
echo
echo "Per boot (logs in $work):"
sed 's/^RESULT /  /' "$results" | sort
[ $skipped -gt 0 ] && echo "check-swap: $skipped recorded boots not run: past the ${budget} s budget (SWAP_BUDGET)"

if [ -n "$missing" ]; then
    echo "check-swap: the MUST configurations could not run, missing:$missing"
    if [ "${THROTTLE_SWAP_ALLOW_MISSING:-0}" = 1 ]; then
        echo "check-swap: THROTTLE_SWAP_ALLOW_MISSING=1: not failing for that"
    else
        fail=1
    fi
fi

if [ -n "$machine" ]; then
    l=$(printf '%s\n' "$raw_rows" | grep ' status=fail ' | field log | head -n 1)
    if [ -f "$l" ]; then
        echo
        echo "================ $l (the control row's console from the first sign of trouble) ================"
        clean < "$l" | sed -n '/blocked for more than\|=== host:\|Kernel panic\|Out of memory\|VERIFY-FAILED\|SETUP-FAILED/,$p' | head -n 100
    fi
    echo "check-swap: FAIL: $machine; the MUST rows' results do not judge the filter here"
    exit 1
fi
if [ $fail = 1 ]; then
    for l in $failed_logs; do
        [ -f "$l" ] || continue
        echo
        echo "================ $l (markers, then the console from the first sign of trouble) ================"
        clean < "$l" | grep -E '^(ROOTFS|GUEST-CONFIG|SYSCTL|NBDKIT-CMD|UNIT-[A-Za-z]*|SWAP-ON|GUARDS|FORKCHECK|FORKCHILD|SWAPTEST|WRITEOUT-DONE|SWAPIN-DONE|VERIFY|SETUP-FAILED|SWAPSTATS|nbdkit: .*(error|guards))'
        clean < "$l" | sed -n '/blocked for more than\|=== host:\|Kernel panic\|Out of memory\|VERIFY-FAILED\|SETUP-FAILED/,$p' | head -n 400
    done
    if [ -n "$failed_must" ]; then
        if [ "$raw_n" -gt 0 ]; then
            echo "check-swap: FAIL: MUST rows failed:$failed_must; the control row raw-disk completed every boot on this machine, so the failure is the filter's"
        else
            echo "check-swap: FAIL: MUST rows failed:$failed_must (the control row raw-disk was not booted: SWAP_CONFIGS)"
        fi
    else
        echo "check-swap: FAIL"
    fi
    exit 1
fi
if [ $notrun_must -gt 0 ]; then
    echo "check-swap: FAIL: $notrun_must MUST boots not run: every MUST boot must run (check-swap.sh starts them before any recorded one, whatever the time)"
    exit 1
fi
echo "check-swap: PASS"
exit 0
