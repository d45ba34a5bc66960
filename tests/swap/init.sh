#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
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

# thr.canary=1: the host's canary boot (swap_canary in common.sh) asks
# only whether a guest reaches this init under its accelerator.
if grep -qw thr.canary=1 /proc/cmdline; then
    echo "SWAP-CANARY-BOOTED"
    poweroff -f
    sleep 60
fi

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
THR_memsize=32M THR_args= THR_units=0 THR_forkcheck=0 THR_avail= THR_perf=0
THR_sysctl= THR_maxsectkb= THR_nrreq= THR_retry=0
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
echo "GUEST-CONFIG cfg=$THR_cfg plugin=$THR_plugin filter=$THR_filter mode=$THR_mode conns=$THR_conns minfree=$THR_minfree guards=$THR_guards units=$THR_units"

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
# thr.sysctl=KEY=VALUE[,KEY=VALUE...] ('+' for a space in VALUE): the
# other settings a remote configuration's sweep tries (issue 30 item 3:
# a bounded TCP send buffer, order-0 send pages).
for kv in $(echo "$THR_sysctl" | tr , ' '); do
    k=${kv%%=*} v=$(echo "${kv#*=}" | tr + ' ')
    echo "$v" > "/proc/sys/$(echo "$k" | tr . /)" || fail "sysctl $k=$v"
    echo "SYSCTL $k=$(cat "/proc/sys/$(echo "$k" | tr . /)")"
done
echo "SYSCTL min_free_kbytes=$(cat /proc/sys/vm/min_free_kbytes) hung_task_timeout_secs=$(cat /proc/sys/kernel/hung_task_timeout_secs)"

[ -b /dev/vda ] || fail "no /dev/vda"

# eth0 on qemu's user network (slirp's fixed 10.0.2.0/24).
STORAGE_ADDR=10.0.2.100 STORAGE_PORT=10809
net_up ()
{
    [ -d /sys/class/net/eth0 ] || fail "no eth0 (a remote configuration needs run-guest.sh's network)"
    ip link set lo up
    ip addr add 10.0.2.15/24 dev eth0 || fail "ip addr add"
    ip link set eth0 up || fail "ip link set eth0 up"
    echo "NET-UP $(ip -o -4 addr show dev eth0 | awk '{ print $4 }') storage=$STORAGE_ADDR:$STORAGE_PORT"
}

# thr.forkcheck=1: what a plugin forks must not inherit the guards
# (nbdkit-throttle-design(1), WHAT THE PLUGIN RUNS), checked here where
# nbdkit really gets PR_SET_IO_FLUSHER and oom_score_adj -1000.  The
# filter at its defaults over the eval plugin, whose pread script
# records its own task flags (field 9 of stat), policy (41) and
# oom_score_adj; the kernel's nbd client reads through /dev/nbd1.
# FORKCHECK ok: nbdkit had PF_MEMALLOC_NOIO on every thread and
# oom_score_adj -1000, and every child had neither flag, SCHED_OTHER and
# the oom_score_adj of this shell (nbdkit's before the filter).
forkcheck ()
{
    local rec st n=0 noio=0 adj bad=0 flags policy cadj p i=0
    local my_adj=$(cat /proc/self/oom_score_adj)
    rec='set -- $(cut -d")" -f2- /proc/self/stat); echo "${7} ${39} $(cat /proc/self/oom_score_adj)" >> /run/fork.out'
    : > /run/fork.out
    /usr/bin/nbdkit -U /run/fork.sock -P /run/fork.pid --filter="$FILTER" \
        "$EVAL_PLUGIN" thread_model='echo parallel' get_size='echo 1M' \
        pread="sh -c '$rec'; dd if=/dev/zero bs=\$3 count=1 2>/dev/null" ||
        { echo "FORKCHECK fail nbdkit exited with $?"; return; }
    while [ ! -s /run/fork.pid ] || [ ! -S /run/fork.sock ]; do
        i=$((i + 1)); [ $i -gt 100 ] && { echo "FORKCHECK fail nbdkit did not start"; return; }
        sleep 0.1
    done
    /usr/sbin/nbd-client -unix /run/fork.sock /dev/nbd1 -N "" -b 4096 >/dev/null ||
        { echo "FORKCHECK fail nbd-client"; kill $(cat /run/fork.pid); return; }
    dd if=/dev/nbd1 of=/dev/null bs=4096 count=16 2>/dev/null
    p=$(cat /run/fork.pid)
    for t in /proc/$p/task/*; do
        st=$(cat $t/stat) || continue
        set -- ${st##*) }
        n=$((n + 1))
        [ $(($7 & PF_MEMALLOC_NOIO)) != 0 ] && noio=$((noio + 1))
    done
    adj=$(cat /proc/$p/oom_score_adj)
    /usr/sbin/nbd-client -d /dev/nbd1 >/dev/null 2>&1
    # Its locked memory must be gone before the real server starts.
    kill $p
    i=0
    while kill -0 $p 2>/dev/null && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
    while read -r flags policy cadj; do
        if [ $((flags & (PF_MEMALLOC_NOIO | PF_LOCAL_THROTTLE))) != 0 ] ||
           [ "$policy" != 0 ] || [ "$cadj" != "$my_adj" ]; then
            bad=$((bad + 1))
        fi
    done < /run/fork.out
    if [ "$n" -gt 0 ] && [ "$noio" = "$n" ] && [ "$adj" = -1000 ] &&
       [ -s /run/fork.out ] && [ "$bad" = 0 ]; then
        echo "FORKCHECK ok parent_threads=$n parent_noio=$noio parent_oom=$adj children=$(wc -l < /run/fork.out)"
    else
        echo "FORKCHECK leak parent_threads=$n parent_noio=$noio parent_oom=$adj children=$(wc -l < /run/fork.out) bad=$bad"
    fi
    sed 's/^/FORKCHILD flags,policy,oom_score_adj: /' /run/fork.out
}
PF_MEMALLOC_NOIO=524288     # 0x00080000
PF_LOCAL_THROTTLE=1048576   # 0x00100000
if [ "$THR_forkcheck" = 1 ]; then
    if [ -n "$FILTER" ] && [ -n "$EVAL_PLUGIN" ]; then
        forkcheck
    else
        echo "FORKCHECK fail the filter or the eval plugin is not in the initramfs"
    fi
fi

# thr.units=1: what nbdkit-throttle-swap@.service does at boot, by
# running the unit's own Exec lines in its order (prepare, start, attach;
# at the end, stop), so that the guest boots exactly the units' command
# lines.
# systemd's part is played here: the instance's configuration, the
# unit's OOMScoreAdjust, the main PID from its PIDFile, SIGTERM after
# ExecStop.  The guest runs as root, so the unit's User= and capabilities
# are not played.
UNIT_INSTANCE=swaptest
unit_value ()
{
    sed -n "s/^$1=//p" "$UNIT" | sed "s/%i/$UNIT_INSTANCE/g"
}
unit_step ()
{
    local key=$1 line oom
    oom=$(unit_value OOMScoreAdjust)
    unit_value "$key" > /tmp/unit-steps
    [ -s /tmp/unit-steps ] || fail "the unit has no $key="
    while IFS= read -r line; do
        # '+' (full privileges) is the only prefix the unit uses; any
        # other would mean this no longer does what systemd does.
        case "$line" in
            +/*) line=${line#+} ;;
            /*) ;;
            *) fail "unit $key=$line: a prefix this init does not play" ;;
        esac
        echo "UNIT-$key $line"
        # shellcheck disable=SC2086
        ( [ -n "$oom" ] && echo "$oom" > /proc/self/oom_score_adj; exec $line ) ||
            fail "unit $key=$line exited with $?"
    done < /tmp/unit-steps
}

if [ "$THR_units" = 1 ]; then
    [ -n "${UNIT:-}" ] || fail "the swap unit is not in the initramfs"
    mkdir -p "$UNIT_CONFDIR"
    {
        echo "DEVICE=/dev/nbd0"
        echo "DISK=/dev/vda"
        echo "CONNECTIONS=$THR_conns"
        [ -n "$THR_mode" ] && echo "MODE=$THR_mode"
        # As below: the filter's debug, not the core's per-request lines.
        [ "$THR_verbose" = 1 ] && echo "NBDKIT_ARGS=-v -D nbdkit.backend.datapath=0"
    } > "$UNIT_CONFDIR/$UNIT_INSTANCE.conf"
    sed 's/^/UNIT-CONF /' "$UNIT_CONFDIR/$UNIT_INSTANCE.conf"
    unit_step ExecStartPre
    unit_step ExecStart
    pidfile=$(unit_value PIDFile)
    [ -s "$pidfile" ] || fail "no PID file $pidfile after ExecStart"
    NBDKIT_PID=$(cat "$pidfile")
    unit_step ExecStartPost
elif [ "$THR_plugin" = raw ]; then
    # The control row: swap on the virtio disk itself, no NBD, no nbdkit.
    NBDKIT_PID=
    mkswap /dev/vda >/dev/null || fail "mkswap"
    swapon /dev/vda || fail "swapon"
else
    case "$THR_plugin" in
        file)   set -- file file=/dev/vda ;;
        memory) set -- memory size=$THR_memsize allocator=malloc,mlock=true ;;
        disk)   [ -n "$DISK_PLUGIN" ] || fail "the disk plugin is not in the initramfs"
                set -- "$DISK_PLUGIN" file=/dev/vda ;;
        # Remote storage: the host's storage server, reached through
        # qemu's user network (run-guest.sh: restrict=on, and one
        # guestfwd from STORAGE_ADDR to the server on the host's
        # loopback, the only address the guest can reach).
        nbd)    net_up
                set -- nbd hostname=$STORAGE_ADDR port=$STORAGE_PORT
                # thr.retry=1: nbdkit's retry filter below the throttle
                # reopens the nbd plugin's connection when the storage
                # goes away (run-guest.sh's thr.stfault=kill).
                [ "$THR_retry" = 1 ] && set -- --filter=retry "$@" ;;
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
    # thr.maxsectkb=N: the largest request the kernel sends to nbd0,
    # so the largest write the server forwards (issue 30 item 3).
    # thr.nrreq=N: the requests the kernel keeps queued to nbd0, so
    # with max_sectors_kb the data its memalloc socket may take from the
    # reserves before the server reads it.
    if [ -n "$THR_nrreq" ]; then
        echo "$THR_nrreq" > /sys/block/nbd0/queue/nr_requests ||
            fail "nr_requests=$THR_nrreq"
    fi
    if [ -n "$THR_maxsectkb" ]; then
        echo "$THR_maxsectkb" > /sys/block/nbd0/queue/max_sectors_kb ||
            fail "max_sectors_kb=$THR_maxsectkb"
    fi
    mkswap /dev/nbd0 >/dev/null || fail "mkswap"
    swapon /dev/nbd0 || fail "swapon"
fi
echo "SWAP-ON $(tail -n 1 /proc/swaps)"
# The request sizes the swap device allows: they decide how many
# requests a MiB of swap costs on each path.
swapdev=$(tail -n 1 /proc/swaps | awk '{ print $1 }'); swapdev=${swapdev#/dev/}
echo "SWAP-QUEUE dev=$swapdev rotational=$(cat /sys/block/$swapdev/queue/rotational) max_sectors_kb=$(cat /sys/block/$swapdev/queue/max_sectors_kb) max_hw_sectors_kb=$(cat /sys/block/$swapdev/queue/max_hw_sectors_kb) nr_requests=$(cat /sys/block/$swapdev/queue/nr_requests) page_cluster=$(cat /proc/sys/vm/page-cluster)"

# The TCP counters of a remote configuration: a packet dropped because
# it came from the emergency reserves (PFMemallocDrop), or dropped by
# the stack or the device for want of room, means the forwarding path
# ran short of memory; retransmits are reported beside them.
netstats ()
{
    [ -d /sys/class/net/eth0 ] || return 0
    awk '$1 == "TcpExt:" && !h { for (i = 2; i <= NF; i++) k[i] = $i; h = 1; next }
         $1 == "TcpExt:" { for (i = 2; i <= NF; i++) if (k[i] == "PFMemallocDrop") d = $i }
         END { printf "pfmemalloc_drop=%d ", d }' /proc/net/netstat
    # Segments the guest's own stack or its network device dropped for
    # want of memory or queue room: what a reserve too small for the
    # forwarding shows besides PFMemallocDrop.  A retransmit without
    # one of them is the host answering late (run-guest.sh).
    awk '$1 == "TcpExt:" && !h { for (i = 2; i <= NF; i++) k[i] = $i; h = 1; next }
         $1 == "TcpExt:" { for (i = 2; i <= NF; i++)
                             if (k[i] ~ /^(RcvPruned|OfoPruned|TCPRcvQDrop|TCPBacklogDrop|TCPOFODrop)$/) d += $i }
         END { printf "stack_drops=%d ", d + 0 }' /proc/net/netstat
    printf "rx_dropped=%d " "$(cat /sys/class/net/eth0/statistics/rx_dropped)"
    awk '$1 == "Tcp:" && !h { for (i = 2; i <= NF; i++) k[i] = $i; h = 1; next }
         $1 == "Tcp:" { for (i = 2; i <= NF; i++) if (k[i] == "RetransSegs") r = $i }
         END { printf "retrans=%d\n", r }' /proc/net/snmp
}

# Thread flags (field 9 of stat; the comm field may hold spaces, so count
# from its closing parenthesis), scheduling policy (field 41, 1 is
# SCHED_FIFO) and the locked memory of nbdkit.  The pages swapped out so
# far (pswpout) go with it: real-time threads in the line taken before
# the workload with pswpout=0 prove that the filter's throttle-rt=auto
# made them real-time before the first swap-out reached the server.
guards ()
{
    local when=$1 n=0 noio=0 lt=0 rt=0 t st flags policy vmlck pswpout
    pswpout=$(awk '$1 == "pswpout" { print $2 }' /proc/vmstat)
    for t in /proc/$NBDKIT_PID/task/*; do
        st=$(cat $t/stat) || continue
        set -- ${st##*) }
        flags=$7 policy=${39}
        n=$((n + 1))
        [ $((flags & PF_MEMALLOC_NOIO)) != 0 ] && noio=$((noio + 1))
        [ $((flags & PF_LOCAL_THROTTLE)) != 0 ] && lt=$((lt + 1))
        [ "$policy" = 1 ] && rt=$((rt + 1))
        echo "THREAD $when tid=${t##*/} comm=$(cat $t/comm) flags=$(printf 0x%08x $flags) noio=$(( (flags & PF_MEMALLOC_NOIO) != 0 )) local_throttle=$(( (flags & PF_LOCAL_THROTTLE) != 0 )) policy=$policy"
    done
    vmlck=$(awk '/^VmLck:/ { print $2 }' /proc/$NBDKIT_PID/status)
    echo "GUARDS $when threads=$n noio=$noio local_throttle=$lt vmlck_kb=$vmlck oom_score_adj=$(cat /proc/$NBDKIT_PID/oom_score_adj) rt=$rt pswpout=$pswpout"
}
if [ -n "$NBDKIT_PID" ]; then
    guards pre
    # To map the RIP of a faulting nbdkit thread in a task dump to a library.
    sed "s/^/MAPS /" /proc/$NBDKIT_PID/maps
fi

# thr.perf=1 (SWAP_PERF=1 on the host): where the guest's one CPU goes
# during the workload, by task and by function (cpu-clock samples of
# every task, kernel included), as PERF-* lines after the workload.
perf_pid=
if [ "$THR_perf" = 1 ]; then
    if command -v perf >/dev/null; then
        perf record -a -g -F 199 -o /run/perf.data >/dev/null 2>&1 &
        perf_pid=$!
        sleep 1
    else
        echo "PERF-NONE perf is not in the initramfs (build it with SWAP_PERF=1)"
    fi
fi
# Every configuration swaps the same: thr.size MiB in thr.avail MiB of
# available memory (see common.sh and swaptest.c).  The units
# configuration keeps 32 MiB of swaptest's pages after the workload,
# most of them on swap, while it stops the unit (below), and has them
# verified after.
if [ "$THR_units" = 1 ]; then
    mkfifo /run/hold || fail "mkfifo"
    SWAPTEST_HOLD=/run/hold swaptest $THR_size ${THR_size:+$THR_avail} &
    hold_pid=$!
    while [ ! -e /run/hold.ready ]; do
        if ! kill -0 "$hold_pid" 2>/dev/null; then
            wait "$hold_pid"
            echo "SWAPTEST-EXIT $?"
            fail "swaptest ended before holding its pages"
        fi
        sleep 0.1
    done
else
    swaptest $THR_size ${THR_size:+$THR_avail}
    echo "SWAPTEST-EXIT $?"
fi
if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid"
    for view in "TASK --no-children --sort comm" \
                "SELF --no-children --sort comm,sym --percent-limit 0.5" \
                "CHILDREN --children --sort sym --percent-limit 2"; do
        # shellcheck disable=SC2086
        perf report -i /run/perf.data --stdio -g none ${view#* } 2>&1 |
            grep -v -e '^#' -e '^$' | head -n 60 | sed "s/^/PERF-${view%% *} /"
    done
    rm -f /run/perf.data
fi
[ -n "$NBDKIT_PID" ] && guards post
[ -d /sys/class/net/eth0 ] && echo "NET-STATS $(netstats)"
awk '/^(pswpin|pswpout) / { printf "%s=%d ", $1, $2 } END { print "" }' \
    /proc/vmstat | sed 's/^/SWAPSTATS /'
# The requests the swap device served, their mean size and time
# (/sys/block/DEV/stat): where a path loses against the raw disk.
awk '{ printf "SWAP-DEVSTAT reads=%d read_kib=%d read_ms=%d writes=%d write_kib=%d write_ms=%d", $1, $3 / 2, $4, $5, $7 / 2, $8
       if ($1) printf " read_avg_kib=%.1f read_avg_ms=%.2f", $3 / 2 / $1, $4 / $1
       if ($5) printf " write_avg_kib=%.1f write_avg_ms=%.2f", $7 / 2 / $5, $8 / $5
       print "" }' /sys/block/$swapdev/stat
# The guest CPU the server cost (utime, stime in ticks of 1/100 s).
[ -n "$NBDKIT_PID" ] && awk '{ sub(/.*\) /, ""); print "NBDKIT-CPU utime=" $12 " stime=" $13 }' /proc/$NBDKIT_PID/stat
if [ "$THR_units" = 1 ]; then
    # The unit's stop while its device is swap in use, as at shutdown:
    # systemd's own dev-nbd0.swap is being stopped (a swapoff already
    # bringing pages back) when the unit's ExecStop runs.  ExecStop must
    # wait for that swapoff (its own fails: EINVAL), then nbd-client -d;
    # then SIGTERM to the main process, which must exit; then every page
    # swaptest kept must read back as written.
    used0=$(awk '$1 == "/dev/nbd0" { print $4 }' /proc/swaps)
    echo "UNIT-STOP-SWAPUSED kib=${used0:-0}"
    [ "${used0:-0}" -gt 1024 ] || fail "unit stop: only ${used0:-0} KiB on swap: nothing to bring back"
    swapoff /dev/nbd0 > /run/swapoff.out 2>&1 &
    so_pid=$!
    # Until that swapoff has begun (Used falls), so that ExecStop meets it.
    raced=0 i=0
    while u=$(awk '$1 == "/dev/nbd0" { print $4 }' /proc/swaps) && [ -n "$u" ]; do
        if [ "$u" -lt "$used0" ]; then raced=1; break; fi
        i=$((i + 1)); [ $i -gt 600 ] && fail "unit stop: swapoff brought nothing back in 30 s"
        sleep 0.05
    done
    unit_step ExecStop
    so_rc=0
    wait "$so_pid" || so_rc=$?
    echo "UNIT-STOP-RACE raced=$raced concurrent_swapoff_exit=$so_rc $(tr '\n' ' ' < /run/swapoff.out)"
    grep -q '^/dev/nbd0 ' /proc/swaps && fail "unit stop: /dev/nbd0 is still swap"
    [ -e /sys/block/nbd0/pid ] && fail "unit stop: /dev/nbd0 is still connected"
    kill -TERM "$NBDKIT_PID"
    i=0
    while [ -d "/proc/$NBDKIT_PID" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "unit stop: nbdkit still running 10 s after SIGTERM"
        sleep 0.1
    done
    echo "UNIT-STOPPED swapoff, nbd-client -d, nbdkit exited"
    echo > /run/hold
    wait "$hold_pid"
    echo "SWAPTEST-EXIT $?"
fi
echo "GUEST-DONE"
poweroff -f
sleep 60
