#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Boots one swap-over-NBD test guest and classifies the run.
#
#   run-guest.sh [-w WORKDIR] [-l LOG] [-n BOOT] [-a kvm|tcg] CONFIG
#
# CONFIG is a name from common.sh.  -a: the accelerator check-swap.sh
# chose once for every boot; without it swap_accel (common.sh) chooses,
# with its canary boot.  WORKDIR holds initramfs.cpio.gz
# (built by build-initramfs.sh when missing) and the guest's disk while it
# runs.  The serial console goes to LOG (default WORKDIR/CONFIG.BOOT.log).
# Prints one line:
#
#   RESULT cfg=C boot=N status=pass|fail writeout=0|1 swapin=0|1 hung=0|1
#          reason=R wo=SECS si=SECS total=SECS
#          guards=ok|missing|n/a|no-rt|rt-late|fork-leak|fork-fail|fork-missing
#          swapout_mib=M swapin_mib=M target_mib=M wo_out_mib=M
#          si_in_mib=M si_out_mib=M pfmemalloc_drop=N|- stack_drops=N|-
#          rx_dropped=N|- retrans=N|- stuck_warnings=N fault=KIND:SECS|-
#          elapsed=SECS log=LOG
#
# and exits 0 when the boot passed: both phases completed and verified,
# the guest swapped what the workload must (within SWAP_TOLERANCE), and
# (for configs with thr.guards=1) every nbdkit thread carried
# PF_MEMALLOC_NOIO and PF_LOCAL_THROTTLE with locked memory, and was
# SCHED_FIFO before the first page was swapped out (and, with
# thr.forkcheck=1, a process forked by the eval plugin
# under the filter inherited none of the guards).  "hung" means the
# guest's hung-task detector panicked it, or the host gave up: an nbd
# request unanswered for $SWAP_STUCK (60) seconds, no
# console output for $SWAP_STALL seconds or no end after
# $SWAP_TIMEOUT seconds; then a sysrq-t task dump is taken through the
# qemu monitor before qemu is killed, so the log shows where every thread
# waits.  The first three see a guest that stopped; SWAP_TIMEOUT only
# one that keeps printing and never ends, so it is far above what a
# passing boot takes on a loaded host: under TCG at a load average of
# 10 a remote-c1 boot took 244 s (75 to 90 s idle), and a 300 s bound
# would have failed the filter for the host's load.
#
# Environment: SWAP_TIMEOUT (default 600), SWAP_STALL (90), SWAP_STUCK (60),
# SWAP_SMP (guest CPUs, 1), SWAP_MEM (guest MiB, 320: common.sh), SWAP_DISK_MIB (512),
# SWAP_EXTRA_APPEND (more kernel arguments, e.g. thr.hungsecs=30),
# SWAP_PERF=1 (a profile of each boot's workload: perf in the initramfs
# and thr.perf=1, see init.sh),
# THROTTLE_FILTER, THROTTLE_DISK_PLUGIN (used when the initramfs has to be
# built).

set -uo pipefail

srcdir=$(cd "$(dirname "$0")" && pwd)
. "$srcdir/common.sh"

work= log= boot=1 accel=
while getopts w:l:n:a: opt; do
    case $opt in
        w) work=$OPTARG ;;
        l) log=$OPTARG ;;
        n) boot=$OPTARG ;;
        a) accel=$OPTARG ;;
        *) echo "usage: run-guest.sh [-w WORKDIR] [-l LOG] [-n BOOT] [-a kvm|tcg] CONFIG" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
cfg=${1:?usage: run-guest.sh [-w WORKDIR] [-l LOG] [-n BOOT] [-a kvm|tcg] CONFIG}
args=$(swap_config "$cfg" args) || { echo "run-guest: unknown config $cfg" >&2; exit 2; }

work=${work:-${TMPDIR:-/tmp}/swaptest-$(id -u)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
log=${log:-$work/$cfg.$boot.log}
timeout=${SWAP_TIMEOUT:-600}
stall=${SWAP_STALL:-90}
stuck=${SWAP_STUCK:-60}
stuck_re=$(seq -s "|" "$stuck" 30 3000)

qemu=$(command -v qemu-system-x86_64) || { echo "run-guest: no qemu-system-x86_64" >&2; exit 77; }
kernel=$(swap_kernel)
[ -n "$kernel" ] || { echo "run-guest: no /boot/vmlinuz-*" >&2; exit 77; }
if [ ! -f "$work/initramfs.cpio.gz" ]; then
    "$srcdir/build-initramfs.sh" "$work" >&2 || exit 1
fi
case "$accel" in
    kvm|tcg) ;;
    "") accel_line=$(swap_accel "$kernel" "$work/initramfs.cpio.gz") ||
            { echo "run-guest: $accel_line" >&2; exit 2; }
        accel=${accel_line%% *}
        echo "run-guest: guests run under $accel (${accel_line#* })" >&2 ;;
    *) echo "run-guest: -a $accel: expected kvm or tcg" >&2; exit 2 ;;
esac
# Under KVM the guest sees the host's CPU; under TCG qemu's default.
cpu=
[ "$accel" = kvm ] && cpu="-cpu host"

tmp=$(mktemp -d "$work/run-$cfg-$boot.XXXXXX")
cleanup ()
{
    [ -n "${catpid:-}" ] && kill "$catpid" 2>/dev/null
    [ -n "${qpid:-}" ] && kill -9 "$qpid" 2>/dev/null
    [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

truncate -s "${SWAP_DISK_MIB:-512}M" "$tmp/disk.img"

# Remote configurations (thr.plugin=nbd): the storage server runs here,
# on the host, listening on 127.0.0.1 only: nbdkit's memory plugin
# (thr.stdelay=T: nbdkit's delay filter adds T to every read and write).
# The guest reaches it through qemu's user network with restrict=on,
# which lets the guest reach nothing but its one guestfwd: each
# connection to 10.0.2.100:10809 (init.sh's STORAGE_ADDR) runs WORK/relay
# (relay.c, built by build-initramfs.sh) to the server here, so nothing
# leaves this machine, and the guest's nbd plugin opens one connection
# to the storage for each of its clients, as deployed.  (A socket
# chardev instead of the relay carries one connection only; socat or nc
# instead made swap-in ten times slower under TCG: relay.c says why.)
nic=(-nic none)
initrd=$work/initramfs.cpio.gz
spid= sport=
# thr.stfault=kill:SECS or stop:SECS: at the guest's first
# SWAPIN-PROGRESS line the storage server is killed (SIGKILL) and
# started again SECS later on the same port and the same data, or
# stopped (SIGSTOP) for SECS, a latency spike, then continued.  A
# killed server must keep what it acknowledged: its data is a file
# here (nbdkit's file plugin; the host's page cache outlives the
# process), not the memory plugin.
sfault=$(printf '%s\n' $args | sed -n 's/^thr\.stfault=//p')
sfault_kind=${sfault%%:*} sfault_secs=${sfault#*:}
case "$sfault_kind" in
    ""|kill|stop) ;;
    *) echo "run-guest: thr.stfault=$sfault: expected kill:SECS or stop:SECS" >&2; exit 2 ;;
esac
# storage_start: start the storage server on $sport (a random free port
# when empty); sets spid.  Returns 1 when it did not start.
storage_start ()
{
    local fixed=$sport tries=20
    [ -n "$fixed" ] && tries=1
    for _ in $(seq $tries); do
        [ -n "$fixed" ] || sport=$((20000 + RANDOM % 40000))
        rm -f "$tmp/storage.pid"
        # shellcheck disable=SC2086
        nbdkit -f -i 127.0.0.1 -p "$sport" -P "$tmp/storage.pid" $sfilter \
            $splugin $sparams >> "$tmp/storage.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do
            [ -s "$tmp/storage.pid" ] || ! kill -0 "$spid" 2>/dev/null && break
            sleep 0.1
        done
        [ -s "$tmp/storage.pid" ] && kill -0 "$spid" 2>/dev/null && return 0
        wait "$spid" 2>/dev/null
        spid=
    done
    return 1
}
case " $args " in
    *" thr.plugin=nbd "*)
        sdelay=$(printf '%s\n' $args | sed -n 's/^thr\.stdelay=//p')
        sfilter= sparams=
        [ -n "$sdelay" ] && sfilter=--filter=delay sparams="delay-read=$sdelay delay-write=$sdelay"
        splugin="memory ${SWAP_DISK_MIB:-512}M"
        if [ "$sfault_kind" = kill ]; then
            truncate -s "${SWAP_DISK_MIB:-512}M" "$tmp/storage.img"
            splugin="file $tmp/storage.img"
        fi
        command -v nbdkit >/dev/null || { echo "run-guest: a remote configuration needs nbdkit on the host" >&2; exit 77; }
        [ -x "$work/relay" ] && [ -f "$work/initramfs-nbd.cpio.gz" ] ||
            { echo "run-guest: no $work/relay or $work/initramfs-nbd.cpio.gz (build-initramfs.sh builds them)" >&2; exit 1; }
        initrd=$work/initramfs-nbd.cpio.gz
        # A port that nobody else holds: nbdkit fails to start on a
        # taken one, and another is tried.
        storage_start || { echo "run-guest: the storage server did not start: $(cat "$tmp/storage.log")" >&2; exit 1; }
        nic=(-netdev "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:10809-cmd:$work/relay $sport"
             -device virtio-net-pci,netdev=n0)
        ;;
esac
mkfifo "$tmp/mon.in" "$tmp/mon.out"
cat "$tmp/mon.out" > "$tmp/mon.log" &
catpid=$!

# rootfstype=ramfs: the initramfs stays in unswappable ramfs, as binaries
# on a real root file system are never written to swap.  On tmpfs the
# kernel would swap nbdkit's own text out to the device nbdkit serves.
perf=
[ "${SWAP_PERF:-0}" = 1 ] && perf=thr.perf=1
append="console=ttyS0 panic=-1 rootfstype=ramfs zswap.enabled=0 mitigations=off thr.cfg=$cfg $args $perf ${SWAP_EXTRA_APPEND:-}"

start=$(date +%s)
# Append: the host adds its own lines to the log while qemu writes.
: > "$log"
# shellcheck disable=SC2086
"$qemu" -accel "$accel" $cpu -m "$SWAP_MEM" -smp "${SWAP_SMP:-1}" \
    -nographic -no-reboot "${nic[@]}" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "$append" \
    -drive file="$tmp/disk.img",format=raw,if=virtio,cache=unsafe \
    -monitor pipe:"$tmp/mon" \
    < /dev/null >> "$log" 2>&1 &
qpid=$!

host_verdict=
last_size=-1 last_change=$start
fault_done=
while kill -0 "$qpid" 2>/dev/null; do
    sleep 1
    now=$(date +%s)
    if [ -n "$sfault_kind" ] && [ -z "$fault_done" ] && grep -q SWAPIN-PROGRESS "$log"; then
        fault_done=1
        echo "=== host: storage fault: $sfault_kind for $sfault_secs s at $((now - start)) s ===" >> "$log"
        if [ "$sfault_kind" = kill ]; then
            kill -KILL "$spid"; wait "$spid" 2>/dev/null
            sleep "$sfault_secs"
            if storage_start; then
                echo "=== host: storage restarted on port $sport ===" >> "$log"
            else
                echo "=== host: storage did not restart: $(tail -n 3 "$tmp/storage.log") ===" >> "$log"
                fault_done=failed
            fi
        else
            kill -STOP "$spid"; sleep "$sfault_secs"; kill -CONT "$spid"
            echo "=== host: storage continued ===" >> "$log"
        fi
        # The fault's own seconds are no stall of the guest's.
        last_change=$(date +%s)
    fi
    # Progress is console output other than the kernel's periodic
    # complaints, which a hung guest keeps printing.
    size=$(grep -Evc 'Possible stuck request|clocksource' "$log" 2>/dev/null)
    if [ "$size" != "$last_size" ]; then
        last_size=$size last_change=$now
    fi
    # The nbd driver reports a request unanswered for 30, 60, ... s: a
    # server that has not answered one for $stuck s has deadlocked, even
    # when no task is blocked in D state for the hung-task detector.
    if grep -Eq "Possible stuck request.*Runtime ($stuck_re) seconds" "$log"; then
        host_verdict=stuck-request
    elif [ $((now - start)) -ge "$timeout" ]; then
        host_verdict=timeout
    elif [ $((now - last_change)) -ge "$stall" ]; then
        host_verdict=stall
    fi
    if [ -n "$host_verdict" ]; then
        echo "=== host: $host_verdict after $((now - start)) s, sysrq-m and sysrq-t ===" >> "$log"
        # sysrq-m first: the zones' free memory against their
        # watermarks, which says whose allocation the hang waits for.
        echo "sendkey alt-sysrq-m" > "$tmp/mon.in"
        sleep 2
        echo "sendkey alt-sysrq-t" > "$tmp/mon.in"
        # Wait for the dump to stop growing the log (TCG prints slowly).
        prev=-1
        for _ in $(seq 30); do
            sleep 2
            size=$(stat -c %s "$log")
            [ "$size" = "$prev" ] && break
            prev=$size
        done
        echo "quit" > "$tmp/mon.in"
        sleep 2
        kill -9 "$qpid" 2>/dev/null
        break
    fi
done
wait "$qpid" 2>/dev/null
qpid=
elapsed=$(( $(date +%s) - start ))

# --- classify ------------------------------------------------------------
# Without carriage returns and nbdkit's colour escapes, markers start lines.
tr -d '\r' < "$log" | sed 's/\x1b\[[0-9;]*m//g' > "$tmp/console"
c=$tmp/console
has () { grep -q -- "$1" "$c"; }
val () { sed -n "s/^.*$1 \([0-9.]*\).*$/\1/p" "$c" | tail -n 1; }

writeout=0 swapin=0 hung=0 reason=
wo=$(val WRITEOUT-DONE)
si=$(val SWAPIN-DONE)
[ -n "$wo" ] && writeout=1
if [ -n "$si" ] && grep -q 'SWAPTEST-EXIT 0' "$c" && ! has VERIFY-FAILED; then
    swapin=1
fi
pswpout=$(sed -n 's/^SWAPSTATS.*pswpout=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
pswpin=$(sed -n 's/^SWAPSTATS.*pswpin=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
swapout_mib=$(( ${pswpout:-0} * 4 / 1024 ))
swapin_mib=$(( ${pswpin:-0} * 4 / 1024 ))
# What each phase swapped (swaptest reads pswpout/pswpin around it)
# against what the suite's workload must swap (common.sh, whatever the
# guest was told): the pages that do not fit the memory left available,
# target = SWAP_SIZE_MIB - SWAP_AVAIL_MIB.  The writeout phase writes
# those out; each swap-in pass must read them back in (and write as
# many out to make room), so that phase moves at least twice the target
# each way.  A boot that swapped less than that, by more than
# SWAP_TOLERANCE percent (20), did not run the suite's workload and
# would look fast: it fails.  Swapping more is the server's own cost
# (nbdkit's file plugin fills the page cache) and counts against it.
mib () { sed -n "s/^$1.* $2=\([0-9]*\).*/\1/p" "$c" | tail -n 1; }
wo_out=$(mib WRITEOUT-SWAPPED out_mib)
si_out=$(mib SWAPIN-SWAPPED out_mib)
si_in=$(mib SWAPIN-SWAPPED in_mib)
tol=${SWAP_TOLERANCE:-20}
target=$((SWAP_SIZE_MIB - SWAP_AVAIL_MIB))
volume=ok
if [ -z "$wo_out" ] || [ -z "$si_out" ] || [ -z "$si_in" ]; then
    volume=unknown
elif [ $((wo_out * 100)) -lt $((target * (100 - tol))) ] ||
     [ $((si_in * 100)) -lt $((2 * target * (100 - tol))) ] ||
     [ $((si_out * 100)) -lt $((2 * target * (100 - tol))) ]; then
    volume=short
fi

# Remote configurations (thr.plugin=nbd): a boot that completed still
# fails when the forwarding path ran short of memory on the way: a
# packet dropped for coming from the emergency reserves
# (PFMemallocDrop), a segment dropped by the guest's stack or device
# for want of room, or the nbd driver's warning of a request unanswered
# for 30 s.  Every boot reports them, and its TCP retransmits, which
# alone prove nothing: a loaded host answers after the guest's timer
# (tests/swap/README.md).
remote=0
case " $args " in *" thr.plugin=nbd "*) remote=1 ;; esac
pfdrop=$(sed -n 's/^NET-STATS.*pfmemalloc_drop=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
retrans=$(sed -n 's/^NET-STATS.* retrans=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
sdrops=$(sed -n 's/^NET-STATS.* stack_drops=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
rxdrops=$(sed -n 's/^NET-STATS.* rx_dropped=\([0-9]*\).*/\1/p' "$c" | tail -n 1)
stuckw=$(grep -c 'Possible stuck request' "$c")

if has 'blocked for more than'; then
    hung=1 reason=hung-task
elif [ -n "$host_verdict" ]; then
    hung=1 reason=$host_verdict
elif has 'Kernel panic'; then
    reason=panic
elif has VERIFY-FAILED; then
    reason=verify-failed
elif has 'Out of memory: Killed process'; then
    reason=oom
elif has SETUP-FAILED; then
    reason="setup-failed:$(sed -n 's/^.*SETUP-FAILED //p' "$c" | head -n 1 | tr ' ' _)"
elif has SWAPTEST-SHORT; then
    # Less than SWAP_AVAIL_MIB available: the guest is too small for
    # this configuration's server (common.sh).
    reason="short-memory:$(sed -n 's/^SWAPTEST-SHORT //p' "$c" | head -n 1 | tr ' ' _)"
elif [ $swapin = 1 ] && [ "$remote" = 1 ] &&
     { [ -z "$pfdrop" ] || [ -z "$sdrops" ] || [ -z "$rxdrops" ]; }; then
    reason=net-stats-missing
elif [ $swapin = 1 ] && [ "$remote" = 1 ] && [ "$pfdrop" != 0 ]; then
    reason=pfmemalloc-drop
elif [ $swapin = 1 ] && [ "$remote" = 1 ] &&
     { [ "$sdrops" != 0 ] || [ "$rxdrops" != 0 ]; }; then
    # A segment the guest dropped for want of memory: its retransmits
    # (if any) are the reserve's failure, not the host's timing.
    reason=guest-drop
elif [ $swapin = 1 ] && [ "$remote" = 1 ] && [ "$stuckw" != 0 ]; then
    reason=stuck-request-warning
elif [ $swapin = 1 ] && [ $volume != ok ]; then
    # A run that swapped less than the workload must proves less and
    # would look fast.
    reason=swap-volume-$volume
elif [ $swapin = 1 ] && case " $args " in *" thr.units=1 "*) ! has UNIT-STOPPED ;; *) false ;; esac; then
    # The unit's stop (swapoff, nbd-client -d, nbdkit's exit) is part
    # of what the units configuration checks.
    reason=unit-stop-missing
elif [ $swapin = 1 ] && case " $args " in *" thr.units=1 "*) ! has 'UNIT-STOP-RACE raced=1' ;; *) false ;; esac; then
    # The stop must have met a swapoff already running (systemd's own
    # at shutdown), not only run its own.
    reason=unit-stop-race-missed
elif [ $swapin = 1 ] && case " $args " in *" thr.units=1 "*) ! has HOLD-VERIFIED ;; *) false ;; esac; then
    # Every page kept on swap across the stop came back as written.
    reason=unit-stop-pages-unverified
elif [ $swapin = 1 ] && [ -n "$sfault_kind" ] && [ "$fault_done" != 1 ]; then
    # A fault row proves nothing unless the fault met the swap-in.
    reason=storage-fault-missed
elif [ $swapin = 1 ]; then
    reason=ok
else
    reason=exited-early
fi

# Guards: every nbdkit thread flagged and real-time, memory locked, at the
# end of the run (a guard set lazily by a worker shows there).  Without
# the post-run line (the guest hung) the pre-run line is reported.
# Real-time must come before the first swap-out: in the line taken
# after nbd-client connected and before the workload, every thread is
# SCHED_FIFO and nothing was swapped out yet (else guards=rt-late; a
# thread not real-time after the workload: guards=no-rt).
guards=n/a
gline=$(grep -o 'GUARDS post.*' "$c" | tail -n 1)
[ -n "$gline" ] || gline=$(grep -o 'GUARDS pre.*' "$c" | tail -n 1)
pline=$(grep -o 'GUARDS pre.*' "$c" | tail -n 1)
case " $args " in
    *" thr.guards=1 "*)
        guards=missing
        if [ -n "$gline" ]; then
            set -- $(echo "$gline" | sed 's/[a-z_]*=//g')
            # GUARDS WHEN threads noio local_throttle vmlck_kb oom_score_adj
            #        rt pswpout
            if [ "${3:-0}" -gt 0 ] && [ "$4" = "$3" ] && [ "$5" = "$3" ] &&
               [ "${6:-0}" -gt 0 ]; then
                guards=ok
                [ "${8:-}" = "$3" ] || guards=no-rt
            fi
            set -- $(echo "$pline" | sed 's/[a-z_]*=//g')
            if [ $guards = ok ] &&
               { [ "${3:-0}" = 0 ] || [ "${8:-}" != "$3" ] || [ "${9:-}" != 0 ]; }; then
                guards=rt-late
            fi
            case "$gline" in "GUARDS pre"*) guards=$guards-pre ;; esac
        fi
        ;;
esac

# thr.forkcheck=1: the eval plugin's child inherited no guard (init.sh).
case " $args " in
    *" thr.forkcheck=1 "*)
        fline=$(grep -o 'FORKCHECK [a-z]*' "$c" | tail -n 1)
        if [ "$guards" = ok ] && [ "$fline" != "FORKCHECK ok" ]; then
            fline=${fline#FORKCHECK }
            guards=fork-${fline:-missing}
        fi
        ;;
esac

total=
if [ -n "$wo" ] && [ -n "$si" ]; then
    total=$(awk -v a="$wo" -v b="$si" 'BEGIN { printf "%.1f", a + b }')
fi

status=fail
if [ "$reason" = ok ] && { [ "$guards" = ok ] || [ "$guards" = n/a ]; }; then
    status=pass
fi
echo "RESULT cfg=$cfg boot=$boot accel=$accel status=$status writeout=$writeout swapin=$swapin hung=$hung reason=$reason wo=${wo:--} si=${si:--} total=${total:--} guards=$guards swapout_mib=$swapout_mib swapin_mib=$swapin_mib target_mib=$target wo_out_mib=${wo_out:--} si_in_mib=${si_in:--} si_out_mib=${si_out:--} pfmemalloc_drop=${pfdrop:--} stack_drops=${sdrops:--} rx_dropped=${rxdrops:--} retrans=${retrans:--} stuck_warnings=$stuckw fault=${sfault:--} elapsed=$elapsed log=$log"
[ $status = pass ]
