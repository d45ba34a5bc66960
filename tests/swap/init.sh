#!/bin/sh
# /init of the swap-over-NBD test guest (busybox sh).
#
# Reads its configuration from thr.* words of the kernel command line
# (see common.sh), serves /dev/vda with nbdkit on a Unix socket, attaches
# it as /dev/nbd0 with the kernel nbd client as swap, runs swaptest and
# powers off.  Everything it learns it prints as MARKER lines on the serial
# console, which run-guest.sh parses on the host.

export PATH=/bin:/usr/bin:/usr/sbin:/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run /tmp

. /etc/swaptest.conf

fail ()
{
    echo "SETUP-FAILED $*"
    dmesg | tail -n 30
    poweroff -f
    sleep 60
}

# Defaults, then thr.KEY=VALUE from the command line.
THR_cfg=unnamed THR_plugin=file THR_filter=0 THR_mode= THR_conns=1
THR_minfree=0 THR_guards=0 THR_hungsecs=20 THR_size= THR_verbose=1
THR_memsize=32M THR_args=
for word in $(cat /proc/cmdline); do
    case "$word" in
        thr.*=*)
            key=${word%%=*}; key=${key#thr.}
            case "$key" in
                *[!a-z0-9]*) fail "bad key $key" ;;
            esac
            eval "THR_$key=\${word#*=}"
            ;;
    esac
done
# ramfs (magic 858458f6) keeps the initramfs out of swap; see run-guest.sh.
# On tmpfs nbdkit's own code could be swapped out to the device it serves.
rootfs=$(stat -f -c %t /)
echo "ROOTFS type=0x$rootfs"
[ "$rootfs" = 858458f6 ] || fail "the root file system is not ramfs (rootfstype=ramfs ignored?)"
echo "GUEST-CONFIG cfg=$THR_cfg plugin=$THR_plugin filter=$THR_filter mode=$THR_mode conns=$THR_conns minfree=$THR_minfree guards=$THR_guards"

# build-initramfs.sh listed MODULES dependencies first (virtio_ring before
# virtio).
for m in $MODULES; do
    insmod /lib/modules/$m.ko || fail "insmod $m"
done

# nbdkit 1.32 has a 192 MiB BSS: it does not start in this guest under
# the default heuristic overcommit.
echo 1 > /proc/sys/vm/overcommit_memory
# A deadlock must fail loudly in seconds: a task blocked for
# hung_task_timeout_secs panics the kernel, panic_print=3 dumps every
# task's stack and the memory state, and panic=-1 reboots at once, which
# ends qemu (-no-reboot).
echo "$THR_hungsecs" > /proc/sys/kernel/hung_task_timeout_secs
echo 1 > /proc/sys/kernel/hung_task_panic
echo 3 > /proc/sys/kernel/panic_print
echo 1 > /proc/sys/kernel/sysrq
if [ "$THR_minfree" -gt 0 ]; then
    echo "$THR_minfree" > /proc/sys/vm/min_free_kbytes
fi
echo "SYSCTL min_free_kbytes=$(cat /proc/sys/vm/min_free_kbytes) hung_task_timeout_secs=$(cat /proc/sys/kernel/hung_task_timeout_secs)"

[ -b /dev/vda ] || fail "no /dev/vda"

case "$THR_plugin" in
    file)   set -- file file=/dev/vda ;;
    memory) set -- memory size=$THR_memsize allocator=malloc,mlock=true ;;
    disk)   [ -n "$DISK_PLUGIN" ] || fail "the disk plugin is not in the initramfs"
            set -- "$DISK_PLUGIN" file=/dev/vda ;;
    *)      fail "unknown plugin $THR_plugin" ;;
esac
if [ "$THR_filter" = 1 ]; then
    [ -n "$FILTER" ] || fail "the throttle filter is not in the initramfs"
    set -- --filter="$FILTER" "$@"
    [ -n "$THR_mode" ] && set -- "$@" throttle-mode="$THR_mode"
fi
# Extra nbdkit arguments, '+' for space.
[ -n "$THR_args" ] && set -- "$@" $(echo "$THR_args" | tr + ' ')
# -v shows the filter's debug (reserve size, locked memory); the core's
# per-request lines would flood the console during the pressure.
[ "$THR_verbose" = 1 ] && set -- -v -D nbdkit.backend.datapath=0 "$@"

echo "NBDKIT-CMD nbdkit -U /run/nbd.sock -P /run/nbdkit.pid $*"
/usr/bin/nbdkit -U /run/nbd.sock -P /run/nbdkit.pid "$@" ||
    fail "nbdkit exited with $?"
i=0
while [ ! -s /run/nbdkit.pid ] || [ ! -S /run/nbd.sock ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "nbdkit did not start"
    sleep 0.1
done
NBDKIT_PID=$(cat /run/nbdkit.pid)

/usr/sbin/nbd-client -unix /run/nbd.sock /dev/nbd0 -N "" -swap -b 4096 \
    -C "$THR_conns" || fail "nbd-client exited with $?"
mkswap /dev/nbd0 >/dev/null || fail "mkswap"
swapon /dev/nbd0 || fail "swapon"
echo "SWAP-ON $(tail -n 1 /proc/swaps)"

# Thread flags (field 9 of stat; the comm field may hold spaces, so count
# from its closing parenthesis) and the locked memory of nbdkit.
PF_MEMALLOC_NOIO=524288     # 0x00080000
PF_LOCAL_THROTTLE=1048576   # 0x00100000
guards ()
{
    local when=$1 n=0 noio=0 lt=0 t st flags policy vmlck
    for t in /proc/$NBDKIT_PID/task/*; do
        st=$(cat $t/stat) || continue
        set -- ${st##*) }
        flags=$7 policy=${39}
        n=$((n + 1))
        [ $((flags & PF_MEMALLOC_NOIO)) != 0 ] && noio=$((noio + 1))
        [ $((flags & PF_LOCAL_THROTTLE)) != 0 ] && lt=$((lt + 1))
        echo "THREAD $when tid=${t##*/} comm=$(cat $t/comm) flags=$(printf 0x%08x $flags) noio=$(( (flags & PF_MEMALLOC_NOIO) != 0 )) local_throttle=$(( (flags & PF_LOCAL_THROTTLE) != 0 )) policy=$policy"
    done
    vmlck=$(awk '/^VmLck:/ { print $2 }' /proc/$NBDKIT_PID/status)
    echo "GUARDS $when threads=$n noio=$noio local_throttle=$lt vmlck_kb=$vmlck oom_score_adj=$(cat /proc/$NBDKIT_PID/oom_score_adj)"
}
guards pre
# To map the RIP of a faulting nbdkit thread in a task dump to a library.
sed "s/^/MAPS /" /proc/$NBDKIT_PID/maps

swaptest $THR_size
echo "SWAPTEST-EXIT $?"
guards post
awk '/^(pswpin|pswpout) / { printf "%s=%d ", $1, $2 } END { print "" }' \
    /proc/vmstat | sed 's/^/SWAPSTATS /'
echo "GUEST-DONE"
poweroff -f
sleep 60
