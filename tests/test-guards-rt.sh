#!/usr/bin/env bash
# throttle-rt=auto decides by itself when nbdkit's threads turn
# real-time (see REAL-TIME PRIORITY in nbdkit-throttle-filter(1)):
# - a client that is not a kernel nbd client (python3 here) leaves every
#   thread SCHED_OTHER, and the debug output says why;
# - a client whose process is named nbd-client (python3 started through
#   a symlink of that name) makes every thread SCHED_FIFO at once,
#   before its first request, and the debug output names its PID;
# - a TCP peer on loopback counts as a kernel client (it cannot be told);
# - memory pressure (a PSI stall, made here in a small memory cgroup)
#   makes a running server real-time without any new connection;
# - throttle-rt=off never, throttle-rt=on always from the start.
# Memory pressure is machine-wide: the test holds an exclusive lock
# that test-guards.sh and test-guards-fork.sh share (their servers must
# not turn real-time from the pressure made here), waits until the
# machine has no memory stalls before it starts, and again before it
# ends.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

requires_file "$THROTTLE_FILTER"
requires "$PY" -c 'import nbd'
[ "$(cat /proc/sys/kernel/sched_rt_runtime_us)" != -1 ] &&
    chrt -f 1 true 2>/dev/null ||
    fail "SCHED_FIFO is refused here: the test needs root (or CAP_SYS_NICE) and real-time throttling on"

exec 9> /tmp/nbdkit-throttle-tests-psi.lock
flock 9

# psi_quiet: waits until the memory stall time ("some" total, in us)
# grows less than 2 ms in 2 s, under the filter's trigger (20 ms in
# 2 s, or 10 ms in 1 s).
psi_quiet ()
{
  local a b
  for _ in $(seq 20); do
    a=$(sed -n 's/^some .*total=//p' /proc/pressure/memory)
    sleep 2
    b=$(sed -n 's/^some .*total=//p' /proc/pressure/memory)
    [ $((b - a)) -lt 2000 ] && return 0
  done
  fail "this machine stalled on memory for 40 s: cannot tell what turns real-time on"
}

# Same interpreter, another name: /proc/PID/comm is "nbd-client".
ln -s "$PY" "$tmp/nbd-client"

# client.py URI NBDKIT_PID WANT: prints its own PID, then, after one
# write and once nbdkit has WANT threads (its 4 workers exist), the
# policy (field 41 of stat) of every nbdkit thread on one line.
cat > "$tmp/client.py" <<'EOF'
import nbd, os, sys, time
print(os.getpid(), flush=True)
task = "/proc/%s/task" % sys.argv[2]
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(bytearray(4096), 0)
for _ in range(100):
    if len(os.listdir(task)) >= int(sys.argv[3]):
        break
    time.sleep(0.05)
pol = []
for t in sorted(os.listdir(task)):
    try:
        if open("%s/%s/comm" % (task, t)).read().strip() == "throttle-psi":
            continue
        pol.append(open("%s/%s/stat" % (task, t)).read().rsplit(")", 1)[1].split()[38])
    except FileNotFoundError:
        pass
print(" ".join(pol))
h.shutdown()
EOF

# policies_now: the policies of nbdkit's threads, without a client;
# not the filter's memory pressure watcher (named throttle-psi), which
# is real-time from the start.
policies_now ()
{
  local t
  local t c
  for t in /proc/$pid/task/*; do
    # A thread may exit meanwhile.
    c=$(cat "$t/comm" 2>/dev/null) || continue
    [ "$c" = throttle-psi ] && continue
    sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f39
  done | tr '\n' ' '
}
# watcher_policy: the watcher's policy, or "none".
watcher_policy ()
{
  local t
  for t in /proc/$pid/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = throttle-psi ] || continue
    sed 's/.*) //' "$t/stat" | cut -d' ' -f39
    return
  done
  echo none
}

# expect WHAT POLICIES: all 0 (other) or all 1 (fifo); MIN (6: main,
# connection and 4 workers) of them at least.
expect ()
{
  local want=$1 p n=0 bad=0 min=${MIN:-6}
  shift
  for p in $*; do
    n=$((n + 1))
    [ "$p" = "$want" ] || bad=$((bad + 1))
  done
  [ $n -ge $min ] || fail "only $n nbdkit threads: $*"
  [ $bad = 0 ] || { cat "$log"; fail "$bad of $n threads not policy $want: $*"; }
}

# run CLIENT: connects CLIENT (python3 or nbd-client) to $uri, once
# the threads of an earlier connection are gone; sets $cpid and $pols.
run ()
{
  for _ in $(seq 100); do
    [ "$(ls /proc/$pid/task | wc -l)" -le "$idle" ] && break
    sleep 0.05
  done
  # The connection thread and 4 workers.
  { read -r cpid; read -r pols; } < <("$1" "$tmp/client.py" "$uri" "$pid" $((idle + 5)))
  [ -n "$pols" ] || fail "$1: the client failed"
}

start ()
{
  local name=$1; shift
  start_nbdkit "$name" -D throttle.verbose=1 --threads=4 \
    --filter="$THROTTLE_FILTER" memory 64M "$@"
  log=$tmp/$name.log
  # The guards are set in after_fork, after the socket exists.
  for _ in $(seq 100); do
    grep -q 'throttle: guards: io-flusher' "$log" && break
    sleep 0.1
  done
  idle=$(ls /proc/$pid/task | wc -l)
}

# Without PSI (a kernel built without it, or booted with psi=0) auto
# is real-time from the start.
if [ ! -e /proc/pressure/memory ]; then
  start nopsi
  grep -q 'real-time on: no memory pressure trigger' "$log" ||
    { cat "$log"; fail "no PSI: auto did not turn real-time on at start"; }
  MIN=2 expect 1 $(policies_now)
  stop_nbdkit $pid
  echo "no /proc/pressure/memory here: auto is real-time from the start (asserted)"
  exit 0
fi

# --- auto: python3 stays SCHED_OTHER, nbd-client makes it real-time --
psi_quiet
start auto
grep -q 'SCHED_FIFO on demand' "$log" ||
  { cat "$log"; fail "auto: the debug output does not say SCHED_FIFO on demand"; }
MIN=1 expect 0 $(policies_now)
[ "$(watcher_policy)" = 1 ] ||
  fail "auto: the memory pressure watcher is not SCHED_FIFO: $(watcher_policy)"
run "$PY"
expect 0 $pols
grep -q "peer PID $cpid is python3, not a kernel nbd client: request threads stay SCHED_OTHER" "$log" ||
  { cat "$log"; fail "auto: no debug line on the python3 peer $cpid"; }
grep 'real-time on' "$log" && fail "auto: real-time on after a python3 client"
echo "auto: python3 client: all threads SCHED_OTHER"

run "$tmp/nbd-client"
expect 1 $pols
grep -q "real-time on: peer PID $cpid is nbd-client, a kernel nbd client on this machine: SCHED_FIFO set on [1-9]" "$log" ||
  { cat "$log"; fail "auto: no debug line naming the nbd-client peer $cpid"; }
# Every thread, also those that served no request: after the client
# left, the main thread and nbdkit's other background thread.
MIN=2 expect 1 $(policies_now)
echo "auto: nbd-client: $(grep -o 'real-time on: .*' "$log")"
stop_nbdkit $pid
# And at exit, how long and why.
grep -q "at exit: real-time for the last [0-9.]* s: peer PID $cpid is nbd-client" "$log" ||
  { cat "$log"; fail "auto: no line at exit saying how long and why real-time"; }

# --- auto: a TCP peer on loopback --------------------------------------
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$NBDKIT" -f -v -D throttle.verbose=1 --threads=4 -i 127.0.0.1 -p "$port" \
  --filter="$THROTTLE_FILTER" memory 64M > "$tmp/tcp.log" 2>&1 &
pid=$!
_pids+=("$pid")
log=$tmp/tcp.log
for _ in $(seq 100); do
  grep -q 'throttle: guards: io-flusher' "$log" && break
  sleep 0.1
done
idle=$(ls /proc/$pid/task | wc -l)
uri="nbd://127.0.0.1:$port/"
run "$PY"
expect 1 $pols
grep -q 'real-time on: TCP peer 127.0.0.1 on loopback' "$log" ||
  { cat "$log"; fail "auto: no debug line on the loopback TCP peer"; }
echo "auto: TCP loopback: $(grep -o 'real-time on: .*' "$log")"
stop_nbdkit $pid

# --- off and on ----------------------------------------------------------
start off throttle-rt=off
run "$tmp/nbd-client"
expect 0 $pols
grep 'real-time on' "$log" && fail "off: real-time on"
stop_nbdkit $pid
echo "off: nbd-client: all threads SCHED_OTHER"

start on throttle-rt=on
MIN=2 expect 1 $(policies_now)
grep -q 'SCHED_FIFO set' "$log" || { cat "$log"; fail "on: no 'SCHED_FIFO set'"; }
run "$PY"
expect 1 $pols
stop_nbdkit $pid
echo "on: all threads SCHED_FIFO from the start"

# --- auto: memory pressure ---------------------------------------------
# A stall on memory anywhere counts in /proc/pressure/memory: a cgroup
# of 16 MiB writing and reading back 200 MiB of page cache stalls in
# its own reclaim (about 0.5 s of "some" stall on this machine).
cg=
if [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/throttle-rt.$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/memory/throttle-rt.$$
  echo 16M > "$cg/memory.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
     mkdir "/sys/fs/cgroup/throttle-rt.$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/throttle-rt.$$
  echo 16M > "$cg/memory.max"
fi
[ -n "$cg" ] || fail "cannot create a memory cgroup (v1 or v2) to make memory pressure"
cleanup_cg () { rm -f "$tmp/fill"; [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; :; }
trap 'cleanup_cg; _cleanup' EXIT

start pressure
run "$PY"
expect 0 $pols
for i in $(seq 10); do
  sh -c 'echo $$ > "$1/cgroup.procs" &&
         dd if=/dev/zero of="$2" bs=1M count=200 status=none &&
         cat "$2" > /dev/null' sh "$cg" "$tmp/fill" ||
    fail "the memory hog failed"
  rm -f "$tmp/fill"
  grep -q 'real-time on: memory pressure' "$log" && break
done
grep -q 'real-time on: memory pressure (PSI trigger' "$log" ||
  { cat "$log"; grep . /proc/pressure/memory; fail "auto: memory pressure did not turn real-time on"; }
MIN=2 expect 1 $(policies_now)
echo "auto: $(grep -o 'real-time on: .*' "$log") (after $i hog runs)"
stop_nbdkit $pid
cleanup_cg
psi_quiet
