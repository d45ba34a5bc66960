# SPDX-License-Identifier: BSD-3-Clause
# Shared by build-initramfs.sh, run-guest.sh and check-swap.sh (sourced).

# The configurations of the swap-over-NBD guest test, one a line:
#   NAME  MUST  BOOTS  KERNEL-ARGS (read by the guest's /init)
# MUST=1: the suite fails unless every boot completes both phases and the
# guard check passes.  MUST=0: recorded in the table, never fails the suite.
# thr.minfree=16384 is the vm.min_free_kbytes the man page recommends.
# The MUST configurations are the deployment the reserve issue recommends
# for swap-in: the filter's defaults (throttle-rt=auto: real-time request
# threads from the moment nbd-client, a kernel client on the same
# machine, connects; init.sh checks that this comes before the first
# swap-out) plus that vm.min_free_kbytes.
# thr.units=1: the same deployment started and stopped by the command
# lines of nbdkit-throttle-swap@.service, in its order (see init.sh).
# thr.plugin=nbd: remote storage: the guest's nbdkit forwards with its
# nbd plugin to a storage server on the host (run-guest.sh), the filter
# at its defaults in front, with the two settings swap over a network
# needs (vm.min_free_kbytes=16384, vm.watermark_boost_factor=0: see
# REMOTE STORAGE in nbdkit-throttle-design(1)) but in the -nomin and
# -noboost rows, which leave out one or both; thr.stdelay=T: T added to every request by
# the storage server (nbdkit's delay filter); thr.stfault=kill:S or
# stop:S: the storage server killed and restarted S s later, or stopped
# for S s, at the start of swap-in (run-guest.sh); thr.retry=1: nbdkit's
# retry filter under the throttle, to reconnect.  Two boots each for the
# remote MUST rows: a boot takes 55 to 90 s under TCG on an idle
# machine, about 190 s on a loaded one, and CI must stay under 50
# minutes (every MUST boot runs, whatever the time: check-swap.sh).
swap_configs ()
{
    cat <<'EOF'
disk-wt-c1        1 3 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=1 thr.minfree=16384 thr.guards=1 thr.forkcheck=1
disk-wt-c2        1 3 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=2 thr.minfree=16384 thr.guards=1
disk-wb-c1        1 3 thr.plugin=disk thr.filter=1 thr.mode=writeback thr.conns=1 thr.minfree=16384 thr.guards=1
disk-wb-c2        1 3 thr.plugin=disk thr.filter=1 thr.mode=writeback thr.conns=2 thr.minfree=16384 thr.guards=1
units-wt-c2       1 3 thr.units=1 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=2 thr.minfree=16384 thr.guards=1
disk-wt-c1-nomin  0 1 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=1 thr.minfree=0 thr.guards=1
filter-file       0 1 thr.plugin=file thr.filter=1 thr.conns=1 thr.minfree=16384 thr.guards=1
filter-memory     0 1 thr.plugin=memory thr.memsize=128M thr.filter=1 thr.conns=1 thr.minfree=16384 thr.guards=1
baseline-file     0 1 thr.plugin=file thr.filter=0 thr.conns=1 thr.minfree=16384 thr.guards=0
remote-c1         1 2 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1
remote-c2         1 2 thr.plugin=nbd thr.filter=1 thr.conns=2 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1
remote-nofilter   0 1 thr.plugin=nbd thr.filter=0 thr.conns=1 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=0
remote-c1-nomin   0 1 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=0 thr.guards=1
remote-c1-noboost 0 1 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=0 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1
remote-c1-delay   0 1 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1 thr.stdelay=5ms
remote-c1-restart 0 1 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1 thr.retry=1 thr.stfault=kill:3
remote-c1-spike   0 1 thr.plugin=nbd thr.filter=1 thr.conns=1 thr.minfree=16384 thr.sysctl=vm.watermark_boost_factor=0 thr.guards=1 thr.stfault=stop:10
raw-disk          0 3 thr.plugin=raw thr.filter=0 thr.minfree=16384 thr.guards=0
EOF
}

# The workload, the same in every configuration so that their times
# compare: swaptest writes SWAP_SIZE_MIB after locking away what
# MemAvailable holds above SWAP_AVAIL_MIB (swaptest.c), so a server that
# holds more memory (the writeback pool, the memory plugin's disk) does
# not get a smaller workload, and raw-disk, with no server, no larger one.
# The guest (SWAP_MEM MiB) must leave SWAP_AVAIL_MIB available in every
# configuration; a boot that cannot fails (swaptest exits 3).
SWAP_SIZE_MIB=${SWAP_SIZE_MIB:-100}
SWAP_AVAIL_MIB=${SWAP_AVAIL_MIB:-50}
SWAP_MEM=${SWAP_MEM:-320}

# Prints one field of a configuration: swap_config NAME FIELD
# (FIELD: must, boots or args; args start with the workload, whose
# size a configuration must not change: run-guest.sh holds every boot
# to it).  Fails for an unknown NAME.
swap_config ()
{
    swap_configs | awk -v n="$1" -v f="$2" \
        -v w="thr.size=$SWAP_SIZE_MIB thr.avail=$SWAP_AVAIL_MIB" '
        $1 == n { found = 1
                  if (f == "must") print $2
                  else if (f == "boots") print $3
                  else { s = w; for (i = 4; i <= NF; i++) s = s " " $i; print s } }
        END { exit !found }'
}

# The kernel the guests boot: SWAP_KERNEL (a bundle's, see bundle.sh),
# else the installed Debian kernel, the newest /boot/vmlinuz-*.
swap_kernel ()
{
    if [ -n "${SWAP_KERNEL:-}" ]; then
        echo "$SWAP_KERNEL"
        return
    fi
    ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1
}

# The accelerator the guests run under, and why, as "ACCEL WHY":
#
#   swap_accel KERNEL INITRD
#
# kvm where /dev/kvm is usable and a guest is seen to boot on it, else
# tcg, the emulator.  Usable: a character device this user may read and
# write, on which qemu starts a KVM machine (-machine none); then the
# canary (swap_canary) boots KERNEL with INITRD under KVM and must see
# the test's own /init print its marker within SWAP_CANARY_SECS.  The
# canary is what decides: a machine whose /dev/kvm passes every other
# check can still boot no guest (a nested hypervisor without VMX or SVM
# exposed: the kernel stops after SeaBIOS and every boot would stall).
# Under TCG the ratios to raw-disk mostly measure emulated guest CPU
# (README.md); under KVM they measure the I/O paths.  SWAP_ACCEL=kvm or
# tcg forces one: a forced kvm that is not usable returns 1, as does
# any other value.  SWAP_KVM_DEV (default /dev/kvm) and SWAP_QEMU
# (default qemu-system-x86_64 on PATH) stand in for the tests
# (tests/test-swap-accel.sh).
swap_accel ()
{
    local kernel=$1 initrd=$2
    local dev=${SWAP_KVM_DEV:-/dev/kvm} qemu=${SWAP_QEMU:-} why secs
    [ -n "$qemu" ] || qemu=$(command -v qemu-system-x86_64) || qemu=
    case "${SWAP_ACCEL:-}" in
        tcg) echo "tcg SWAP_ACCEL=tcg"; return 0 ;;
        ""|kvm) ;;
        *) echo "none SWAP_ACCEL=$SWAP_ACCEL: expected kvm or tcg"; return 1 ;;
    esac
    if [ ! -c "$dev" ]; then
        why="no $dev"
    elif [ ! -r "$dev" ] || [ ! -w "$dev" ]; then
        why="$dev is not readable and writable by $(id -un)"
    elif [ -z "$qemu" ]; then
        why="no qemu-system-x86_64"
    elif ! printf 'quit\n' | timeout 30 "$qemu" -accel kvm -machine none \
            -nodefaults -display none -monitor stdio >/dev/null 2>&1; then
        why="qemu -accel kvm fails on $dev"
    elif ! secs=$(swap_canary "$qemu" "$kernel" "$initrd"); then
        why="$dev opens, but no guest boots on it: $secs"
    else
        echo "kvm $dev usable: the canary guest booted in $secs s"
        return 0
    fi
    if [ "${SWAP_ACCEL:-}" = kvm ]; then
        echo "none SWAP_ACCEL=kvm, but $why"
        return 1
    fi
    echo "tcg $why"
}

# The canary boot: swap_canary QEMU KERNEL INITRD boots the test's own
# kernel and initramfs under KVM with thr.canary=1, on which init.sh
# prints SWAP-CANARY-BOOTED and powers off.  Prints the seconds to the
# marker and returns 0, or prints why not and returns 1.  The bound,
# SWAP_CANARY_SECS (30): under TCG, the emulator, on an idle 2-core
# machine the same boot (the kernel, the 7 MiB initramfs unpacked in
# emulated code, init.sh) prints the marker and powers off in 5.3 to
# 6.0 s, and KVM, where it works, is faster still: a KVM that has not
# reached init in five times that is not running the guest (on a
# nested host without VMX or SVM the kernel prints nothing after
# SeaBIOS).  A machine without a working KVM pays the bound once per
# suite, with one CPU busy in qemu meanwhile.
swap_canary ()
{
    local qemu=$1 kernel=$2 initrd=$3 bound=${SWAP_CANARY_SECS:-30}
    local out pid t0 now last
    [ -f "$kernel" ] && [ -f "$initrd" ] ||
        { echo "no kernel or initramfs for the canary ($kernel, $initrd)"; return 1; }
    out=$(mktemp "${TMPDIR:-/tmp}/swap-canary.XXXXXX") || return 1
    t0=$(date +%s%N)
    "$qemu" -accel kvm -cpu host -m "$SWAP_MEM" -smp 1 -nographic -no-reboot \
        -nic none -kernel "$kernel" -initrd "$initrd" \
        -append "console=ttyS0 panic=-1 rootfstype=ramfs thr.canary=1" \
        < /dev/null > "$out" 2>&1 &
    pid=$!
    while :; do
        now=$(date +%s%N)
        grep -aq SWAP-CANARY-BOOTED "$out" && break
        kill -0 "$pid" 2>/dev/null || break
        [ $(( (now - t0) / 1000000000 )) -ge "$bound" ] && break
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if grep -aq SWAP-CANARY-BOOTED "$out"; then
        awk -v ns=$((now - t0)) 'BEGIN { printf "%.1f\n", ns / 1e9 }'
        rm -f "$out"
        return 0
    fi
    last=$(tr -d '\r' < "$out" | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1b[A-Za-z]//g' | grep -av '^ *$' | tail -n 1 | cut -c1-72)
    if [ $(( (now - t0) / 1000000000 )) -ge "$bound" ]; then
        echo "the canary guest printed no marker in ${bound} s (console's last line: '$last')"
    else
        echo "qemu exited before the canary guest's marker (console's last line: '$last')"
    fi
    rm -f "$out"
    return 1
}

swap_kernel_version ()
{
    local k
    k=$(swap_kernel) && [ -n "$k" ] && k=${k##*/} && echo "${k#vmlinuz-}"
}
