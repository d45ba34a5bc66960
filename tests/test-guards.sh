#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The thread and process guards of the throttle filter, against a real
# nbdkit: bad values are refused by name; io-flusher, rt and oom do
# what the kernel permits (auto), refuse to start without it (on), or
# stay away (off); throttle-swap sets them all, a guard's own parameter
# overriding it either way; mlock and the heap reserve show in VmLck
# and in the debug output; and the reserve really spares nbdkit's core
# the page faults of a worker's first large request.  What the guards
# could not take is said in one warning line, the swap verdict, and
# nothing else warns (test-swap-safe.sh: the verdict in stats and the
# metrics).
#
# Where this machine cannot grant a guard (no CAP_SYS_RESOURCE here),
# the test asserts the refusal and the verdict, and says so; the swap
# guest (tests/swap/) asserts the granted case.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"
set -u

requires_file "$THROTTLE_FILTER"
requires "$PY" -c 'import nbd'
# As root every guard can be asked for; the mlock checks below lock
# more than an unprivileged RLIMIT_MEMLOCK allows.
requires_root "the mlock checks lock more than RLIMIT_MEMLOCK allows a user"

pid= bg=
# finish PID: SIGTERM, then SIGKILL if it is still there after 5 s.
finish() {
    kill "$1" 2>/dev/null || :
    wait_until 5 "" gone "$1" ||
        { echo "nbdkit $1 ignored SIGTERM for 5 s: killing it"; kill -9 "$1"; }
}

cat > "$tmp/probe.py" <<'EOF'
# probe.py PID SOCKET threads        -> "tid flags rtprio policy" per thread
# probe.py PID SOCKET faults BYTES   -> minor faults of one write of BYTES
import nbd, os, sys, time
pid, sock, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def stat(path):
    return open(path).read().rsplit(")", 1)[1].split()
def nthreads():
    return len(os.listdir("/proc/%d/task" % pid))
idle = nthreads()
h = nbd.NBD()
h.connect_uri("nbd+unix:///?socket=" + sock)
h.pread(4096, 0)
if what == "threads":
    h.pwrite(bytearray(4096), 0)
    # nbdkit starts the 4 workers (--threads=4) after the handshake:
    # wait until the connection thread and the workers all exist.
    for _ in range(100):
        if nthreads() >= idle + 5:
            break
        time.sleep(0.05)
    for t in sorted(os.listdir("/proc/%d/task" % pid)):
        try:
            f = stat("/proc/%d/task/%s/stat" % (pid, t))
        except FileNotFoundError:
            continue
        # fields 9 (flags), 40 (rt_priority), 41 (policy)
        print(t, f[6], f[37], f[38])
else:
    buf = bytearray(int(sys.argv[4]))
    f0 = int(stat("/proc/%d/stat" % pid)[7])      # field 10, minflt
    h.pwrite(buf, 0)
    f1 = int(stat("/proc/%d/stat" % pid)[7])
    print(f1 - f0)
h.shutdown()
EOF

can_io_flusher=$(yes_no probe_io_flusher)
can_oom=$(yes_no probe_oom_protect)
can_rt=$(yes_no probe_rt)
rt_runtime=$(cat /proc/sys/kernel/sched_rt_runtime_us 2>/dev/null || echo unknown)
can_drop=$(yes_no probe_capsh_drop)
echo "this machine: PR_SET_IO_FLUSHER $can_io_flusher, oom_score_adj -1000" \
     "$can_oom, SCHED_FIFO $can_rt (sched_rt_runtime_us $rt_runtime)," \
     "capsh drops $can_drop"
my_oom=$(cat /proc/self/oom_score_adj)

# start PARAMS...: nbdkit (run through ${wrapper[@]}, if set) on the
# null plugin in the background, serving $tmp/sock; $pid, stderr in
# $tmp/log.  Returns 1 (with $rc) if nbdkit exited instead.
wrapper=() filters=()
start() {
    rm -f "$tmp/sock" "$tmp/pid"
    "${wrapper[@]}" "$NBDKIT" -f -v -D throttle.verbose=1 --threads=4 \
        -U "$tmp/sock" -P "$tmp/pid" \
        --filter="$THROTTLE_FILTER" "${filters[@]}" null size=64M "$@" \
        2>"$tmp/log" &
    bg=$!
    _pids+=("$bg")
    # nbdkit 1.32 writes the pid file before the filter's after_fork,
    # which sets the guards and logs them: wait for that line too.
    local r=0
    wait_until 10 "$bg" started || r=$?
    case $r in
        0) pid=$(cat "$tmp/pid"); return 0 ;;
        1) rc=0; wait "$bg" || rc=$?; bg=; return 1 ;;
    esac
    cat "$tmp/log"; fail "nbdkit did not start in 10 s"
}
started() {
    [ -S "$tmp/sock" ] && [ -s "$tmp/pid" ] &&
        grep -q 'throttle: guards: io-flusher' "$tmp/log"
}
must_start() {
    start "$@" && return 0
    cat "$tmp/log"; fail "nbdkit $* exited with $rc"
}
sanitized=no
case "${SANITIZERS:-no}" in no|"") ;; *) sanitized=yes ;; esac
# warnings: the filter's warning lines of the last start, but those of
# mallopt, which a sanitizer's malloc refuses.
warnings() {
    grep 'throttle: warning: ' "$tmp/log" |
        if [ $sanitized = yes ]; then grep -v 'mallopt refused'; else cat; fi
}
# verdict_names REASON (WHY: the swap verdict of the last start names
# the reason with the beginning of its why; passes or fails later.
# Also: the filter warned in that one line alone.
verdict_names() {
    local n
    n=$(warnings | wc -l)
    if [ "$n" != 1 ]; then
        fail_later "$1: $n warning lines, not the verdict's one:"
        warnings
    elif grep 'throttle: warning: not safe for swap: ' "$tmp/log" |
            grep -qF -- "$1"; then
        pass "the verdict names $1"
    else
        fail_later "the verdict does not name '$1':"
        grep 'throttle: warning: ' "$tmp/log"
    fi
}
# verdict_lacks REASON: the last start's verdict, if any, does not name
# REASON.
verdict_lacks() {
    ! grep 'throttle: warning: not safe for swap: ' "$tmp/log" |
        grep -qF -- "$1" || fail_later "the verdict names $1"
}
stop() {
    finish "$pid"
    if [ -n "$bg" ]; then wait "$bg" 2>/dev/null || :; fi
    pid= bg=
}
threads() { "$PY" "$tmp/probe.py" "$pid" "$tmp/sock" threads; }
vmlck_kb() { awk '/^VmLck:/ { print $2 }' "/proc/$pid/status"; }
# refuse KEY=VALUE MESSAGE: nbdkit must exit non-zero with an error
# containing MESSAGE.
refuse() {
    local args=("$1")
    shift
    if start "${args[@]}"; then
        stop; fail_later "${args[*]}: nbdkit started"
    elif ! grep -F -- "error: $1" "$tmp/log" | grep -q .; then
        fail_later "${args[*]}: exit $rc without an error naming '$1':"; cat "$tmp/log"
    else
        pass "${args[*]} refused: $(grep -F -- "error: $1" "$tmp/log" | head -1)"
    fi
}

# --- bad values are refused, naming the parameter ----------------------
# (one line, ours: see plugin/throttle/params/throttle-params.h)
for kv in throttle-io-flusher=maybe throttle-rt=yes throttle-oom=1 \
          throttle-mlock=all throttle-threads=0 \
          throttle-max-request=32K throttle-max-request=64M \
          throttle-rt-hold=-1 throttle-rt-hold=86401 throttle-rt-hold=1m; do
    refuse "$kv" "$kv"
done
# The help into a file first: under pipefail, grep -q leaving the pipe
# at the first match would fail the pipeline with nbdkit's SIGPIPE.
"$NBDKIT" --filter="$THROTTLE_FILTER" null --help > "$tmp/help" 2>&1 || true
grep -q 'throttle-rt-hold=SECS' "$tmp/help" ||
  fail_later "--help does not list throttle-rt-hold"
refuse throttle-reserve=lots "throttle-reserve=lots: not a size"
refuse throttle-reserve=-1 "throttle-reserve=-1: not a size"
refuse throttle-threads=4x 'throttle-threads=4x: expected a whole number from 1 to 1024'
refuse throttle-max-request=-4M "throttle-max-request=-4M: not a size"
refuse throttle-max-request=big "throttle-max-request=big: not a size"
refuse throttle-reserve=1E "throttle-reserve=1E: more than half of RAM"
grep -q 'throttle-io-flusher=auto|on|off' "$tmp/help" ||
  fail_later "--help does not list throttle-io-flusher"

# --- throttle-io-flusher --------------------------------------------------
# PF_MEMALLOC_NOIO 0x00080000 | PF_LOCAL_THROTTLE 0x00100000
flagbits=$((0x00080000 | 0x00100000))
check_flags() {   # want: set|clear
    local n=0 bad=0 tid flags prio policy
    while read -r tid flags prio policy; do
        n=$((n + 1))
        if [ "$1" = set ] && (( (flags & flagbits) != flagbits )); then
            bad=$((bad + 1)); echo "  thread $tid flags $(printf %#x "$flags")"
        elif [ "$1" = clear ] && (( flags & flagbits )); then
            bad=$((bad + 1)); echo "  thread $tid flags $(printf %#x "$flags")"
        fi
    done < <(threads)
    if (( n < 6 )); then
        fail_later "io-flusher: only $n threads: not all 4 workers exist"
    elif (( bad == 0 )); then
        pass "io-flusher flags $1 on all $n threads"
    else
        fail_later "io-flusher flags not $1 on $bad of $n threads"
    fi
}

must_start
if [ $can_io_flusher = yes ]; then
    check_flags set
    verdict_lacks 'io-flusher ('
else
    verdict_names 'io-flusher (PR_SET_IO_FLUSHER refused: needs CAP_SYS_RESOURCE'
    grep -q 'throttle-swap=off' "$tmp/log" ||
        fail_later "the verdict does not name throttle-swap, the parameter to change"
    check_flags clear
    echo "note: PR_SET_IO_FLUSHER is refused here (no CAP_SYS_RESOURCE):" \
         "flags asserted absent; tests/swap asserts them set in the guest"
fi
stop

if [ $can_io_flusher = yes ]; then
    must_start throttle-io-flusher=on
    check_flags set; stop
else
    refuse throttle-io-flusher=on "throttle-io-flusher=on"
fi
must_start throttle-io-flusher=off
check_flags clear
grep -E '(warning|error): throttle-io-flusher' "$tmp/log" &&
    fail_later "io-flusher=off still warns about throttle-io-flusher"
verdict_names 'io-flusher (throttle-io-flusher=off)'
stop

# --- throttle-rt ------------------------------------------------------------
check_policy() {  # want: fifo|other
    local n=0 bad=0 tid flags prio policy
    while read -r tid flags prio policy; do
        n=$((n + 1))
        if [ "$1" = fifo ] && { [ "$policy" != 1 ] || [ "$prio" != 1 ]; }; then
            bad=$((bad + 1)); echo "  thread $tid policy $policy priority $prio"
        elif [ "$1" = other ] && [ "$policy" != 0 ]; then
            bad=$((bad + 1)); echo "  thread $tid policy $policy priority $prio"
        fi
    done < <(threads)
    # The probe sees the connection thread and the 4 workers at least:
    # fewer means it died or looked too early, and proved nothing.
    if (( n < 6 )); then
        fail_later "rt: only $n threads: not all 4 workers exist"
    elif (( bad == 0 )); then
        pass "rt: all $n threads $1"
    else
        fail_later "rt: $bad of $n threads not $1"
    fi
}
must_start
if [ $can_rt = yes ]; then
    # The probe (python3) is no kernel nbd client: auto stays
    # SCHED_OTHER.  test-guards-rt.sh tests when auto turns real-time.
    check_policy other
    grep -q 'SCHED_FIFO on demand' "$tmp/log" || fail_later "rt: debug output lacks 'SCHED_FIFO on demand'"
else
    check_policy other
    verdict_names 'rt ('
fi
stop
must_start throttle-rt=off
check_policy other; stop
if [ $can_rt = yes ]; then
    must_start throttle-rt=on
    check_policy fifo; stop
fi
if [ $can_drop = yes ]; then
    # Without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 the kernel refuses.
    wrapper=(capsh --drop=cap_sys_nice -- -c 'ulimit -r 0; exec "$0" "$@"')
    refuse throttle-rt=on "throttle-rt=on"
    must_start 
    check_policy other
    verdict_names 'rt (SCHED_FIFO refused: needs CAP_SYS_NICE'
    stop
    wrapper=()
else
    echo "note: not root or no capsh: rt=on refusal not tested"
fi

# --- throttle-oom -------------------------------------------------------------
must_start
adj=$(cat "/proc/$pid/oom_score_adj")
if [ $can_oom = yes ]; then
    [ "$adj" = -1000 ] && pass "oom_score_adj -1000" ||
        fail_later "oom=auto: oom_score_adj is $adj"
else
    [ "$adj" = "$my_oom" ] || fail_later "oom=auto: oom_score_adj changed to $adj"
    verdict_names 'oom (oom_score_adj -1000 refused: needs CAP_SYS_RESOURCE)'
fi
stop
if [ $can_oom = no ]; then
    refuse throttle-oom=on "throttle-oom=on"
fi
must_start throttle-oom=off
grep -E '(warning|error): throttle-oom' "$tmp/log" &&
    fail_later "oom=off still warns about throttle-oom"
[ "$(cat "/proc/$pid/oom_score_adj")" = "$my_oom" ] || fail_later "oom=off changed oom_score_adj"
stop

# --- throttle-swap: every guard at once, each still its own ----------------
refuse throttle-swap=maybe "throttle-swap=maybe: expected auto, on"
# off: ordinary throttling, quiet: no guard, no reserve, no warning; the
# verdict (no) in the debug output only.
must_start throttle-swap=off
check_flags clear
check_policy other
[ "$(cat "/proc/$pid/oom_score_adj")" = "$my_oom" ] ||
    fail_later "throttle-swap=off changed oom_score_adj"
grep -q 'mlock off (nothing), heap reserve 0 bytes (none)' "$tmp/log" &&
    pass "throttle-swap=off: nothing locked, no reserve" ||
    fail_later "throttle-swap=off: something locked or reserved"
[ -z "$(warnings)" ] || { warnings; fail_later "throttle-swap=off warned (above)"; }
grep -q 'not safe for swap (throttle-swap=off: ordinary throttling): io-flusher (throttle-swap=off); rt (throttle-swap=off); oom (throttle-swap=off); mlock (throttle-swap=off); reserve (throttle-swap=off)' "$tmp/log" &&
    pass "throttle-swap=off: no warning, the verdict in the debug output" ||
    fail_later "throttle-swap=off: no debug line of the verdict naming every guard"
stop
# A guard's own parameter overrides it, before or after it.
for args in "throttle-swap=off throttle-mlock=auto" \
            "throttle-mlock=auto throttle-swap=off"; do
    # shellcheck disable=SC2086
    must_start $args
    # (A sanitizer's runtime makes mlock a no-op: VmLck stays 0.)
    lck=$(vmlck_kb)
    grep -q 'mlock auto (everything, on fault)' "$tmp/log" &&
        { (( lck > 0 )) || [ $sanitized = yes ]; } &&
        pass "$args: mlock taken, VmLck $lck kB" ||
        fail_later "$args: mlock not taken (VmLck $lck kB)"
    [ -z "$(warnings)" ] || { warnings; fail_later "$args warned (above)"; }
    grep -q 'mlock (throttle-swap=off)' "$tmp/log" &&
        fail_later "$args: the verdict still names mlock"
    stop
done
# on: every guard required; where one cannot be had nbdkit does not
# start, naming throttle-swap and how to do without that guard.  A
# guard turned off by its own parameter is not required.
on_args=(throttle-swap=on)
if [ $can_io_flusher = no ]; then
    # (with every other guard refused, in the same line: test-swap-safe.sh)
    refuse throttle-swap=on "throttle-swap=on: "
    grep -q 'error: throttle-swap=on: .*cannot set PR_SET_IO_FLUSHER.*; use throttle-swap=auto, or [^,]*throttle-io-flusher=off[^,]*, to start without' "$tmp/log" ||
        fail_later "throttle-swap=on: the error does not say how to start without io-flusher"
    on_args+=(throttle-io-flusher=off)
fi
[ $can_oom = yes ] || on_args+=(throttle-oom=off)
[ $can_rt = yes ] || on_args+=(throttle-rt=off)
must_start "${on_args[@]}"
[ $can_rt = yes ] && check_policy fifo
grep -q 'mlock onfault (everything, on fault), heap reserve 20971520 bytes (faulted and locked)' "$tmp/log" &&
    pass "${on_args[*]}: everything locked, the reserve locked" ||
    fail_later "${on_args[*]}: not everything locked, or no reserve"
if [ $can_io_flusher = no ]; then
    verdict_names 'io-flusher (throttle-io-flusher=off)'
else
    [ -z "$(warnings)" ] || { warnings; fail_later "${on_args[*]} warned (above)"; }
    grep -q 'throttle: safe for swap' "$tmp/log" ||
        fail_later "${on_args[*]}: the verdict is not 'safe for swap'"
fi
stop

# --- the --run command inherits none of it ---------------------------------
# nbdkit forks the --run command from the thread that ran get_ready: it
# must not come out real-time, OOM-proof or an IO flusher.
if [ $sanitized = yes ]; then
    echo "note: sanitizer build: a preloaded sanitizer runtime crashes the" \
         "--run shell: --run inheritance not tested"
else
"$NBDKIT" -U - --filter="$THROTTLE_FILTER" null size=1M \
    --run 'echo "cmd $(cut -d")" -f2- /proc/self/stat | cut -d" " -f8,39,40) $(cat /proc/self/oom_score_adj)"' \
    > "$tmp/run.out" 2>"$tmp/log" || { cat "$tmp/log"; fail_later "--run failed"; }
read -r _ cflags cprio cpolicy cadj < "$tmp/run.out"
if (( (cflags & flagbits) == 0 )) && [ "$cpolicy" = 0 ] && [ "$cadj" = "$my_oom" ]; then
    pass "--run command: flags $(printf %#x "$cflags"), policy $cpolicy, oom_score_adj $cadj"
else
    fail_later "--run command inherited guards: $(cat "$tmp/run.out")"
fi
fi

# --- throttle-mlock and the heap reserve ------------------------------------
# The default reserve: threads (16) x 1280 KiB; throttle-threads scales it.
must_start
grep -q 'heap reserve 20971520 bytes (faulted and locked)' "$tmp/log" &&
    pass "default reserve 20 MiB, locked" || fail_later "default reserve not reported as 20971520 bytes locked"
stop
must_start throttle-threads=4
grep -q 'heap reserve 5242880 bytes' "$tmp/log" || fail_later "throttle-threads=4 reserve is not 5 MiB"
stop

# A plugin or filter that serializes requests serves them all in the
# connection thread: one buffer to reserve.
if [ -f "$(pkg-config --variable=filterdir nbdkit 2>/dev/null)/nbdkit-noparallel-filter.so" ]; then
    filters=(--filter=noparallel)
    must_start
    grep -q 'heap reserve 1310720 bytes' "$tmp/log" &&
        pass "serialized thread model: reserve 1280 KiB" ||
        fail_later "serialized thread model: reserve is not one request (1310720 bytes)"
    stop
    filters=()
else
    echo "note: nbdkit's noparallel filter is missing: serialized reserve not tested"
fi

# AddressSanitizer makes mlock a no-op and replaces malloc, so what
# follows cannot be measured in a sanitizer build.
if [ $sanitized = yes ]; then
    echo "note: sanitizer build ($SANITIZERS): the runtime replaces malloc (and ASan" \
         "makes mlock a no-op): VmLck and page-fault checks skipped"
    echo "$0: finished (sanitizer subset)"
    exit 0
fi

# pool: the reserve is locked, and VmLck says so.
must_start throttle-mlock=pool throttle-reserve=8M
lck=$(vmlck_kb)
(( lck >= 8188 )) && pass "mlock=pool, reserve 8M: VmLck $lck kB" ||
    fail_later "mlock=pool, reserve 8M: VmLck $lck kB < 8188"
grep -Eq 'guards:.*VmLck [1-9][0-9]* kB' "$tmp/log" || fail_later "mlock=pool: VmLck not in the debug output"
stop

# onfault: mlockall in after_fork; the debug output reports VmLck.
must_start throttle-mlock=onfault throttle-reserve=0
lck=$(vmlck_kb)
dbg=$(grep -Eo 'guards:.*VmLck [0-9]+ kB' "$tmp/log" | grep -Eo 'VmLck [0-9]+' | cut -d' ' -f2)
(( lck > 0 )) && (( ${dbg:-0} > 0 )) &&
    pass "mlock=onfault: VmLck $lck kB, debug output reports $dbg kB" ||
    fail_later "mlock=onfault: VmLck $lck kB, debug output '${dbg:-none}'"
stop

# off: nothing locked, even with a reserve.
must_start throttle-mlock=off throttle-reserve=8M
lck=$(vmlck_kb)
(( lck == 0 )) && pass "mlock=off: VmLck 0" || fail_later "mlock=off: VmLck $lck kB"
grep -q 'heap reserve 8388608 bytes (faulted, not locked)' "$tmp/log" ||
    fail_later "mlock=off: reserve not reported as faulted, not locked"
stop

# Locks are not inherited across nbdkit's daemonizing fork: without -f
# the daemon must still hold them.
rm -f "$tmp/sock" "$tmp/pid"
"$NBDKIT" -U "$tmp/sock" -P "$tmp/pid" --filter="$THROTTLE_FILTER" \
    null size=64M throttle-reserve=8M 2>"$tmp/log" || { cat "$tmp/log"; fail "daemon did not start"; }
wait_until 5 "" test -s "$tmp/pid" || fail "the daemon wrote no pid file"
pid=$(cat "$tmp/pid")
_pids+=("$pid")
lck=$(vmlck_kb)
(( lck >= 8188 )) && pass "daemonized: VmLck $lck kB" || fail_later "daemonized: VmLck $lck kB < 8188"
stop

# auto (the default): everything where permitted (root here)...
must_start
grep -q 'mlock auto (everything, on fault)' "$tmp/log" &&
    pass "mlock=auto as root: everything, on fault, VmLck $(vmlck_kb) kB" ||
    fail_later "mlock=auto as root did not lock everything"
stop
if [ $can_drop = yes ]; then
    # ...and without CAP_IPC_LOCK under a limit: onfault refuses, auto
    # warns and falls back to the pools.
    wrapper=(capsh --drop=cap_ipc_lock -- -c 'ulimit -l 64; exec "$0" "$@"')
    refuse throttle-mlock=onfault "throttle-mlock=onfault"
    must_start
    grep -q 'mlock auto (pools and reserve)' "$tmp/log" &&
        pass "mlock=auto without CAP_IPC_LOCK: pools only" ||
        fail_later "mlock=auto without CAP_IPC_LOCK: no fallback"
    verdict_names "mlock (cannot lock all of nbdkit's memory"
    stop
    wrapper=()
fi

# The reserve's purpose: a worker's first large request must not fault
# in nbdkit's request buffer.  Without the reserve the same write costs
# a fault per page, which shows the measurement sees them.  (16M is
# above the default throttle-max-request, which would refuse it.)
big=$((16 * 1024 * 1024))
must_start throttle-reserve=0 throttle-max-request=16M
f0=$("$PY" "$tmp/probe.py" "$pid" "$tmp/sock" faults $big)
stop
must_start throttle-reserve=32M throttle-max-request=16M
f1=$("$PY" "$tmp/probe.py" "$pid" "$tmp/sock" faults $big)
stop
echo "minor faults of a first 16 MiB write: $f0 without the reserve, $f1 with 32M"
(( f0 >= 4000 )) || fail_later "without the reserve only $f0 faults: the measurement is blind"
(( f1 < 64 )) && pass "reserve: $f1 faults (< 64)" || fail_later "reserve: $f1 faults (>= 64)"

echo "$0: finished"
