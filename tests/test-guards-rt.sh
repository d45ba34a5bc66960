#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Who may make nbdkit's threads real-time, and that they turn back (see
# REAL-TIME PRIORITY in nbdkit-throttle-design(1)):
# - a client of root named nbd-client makes every thread SCHED_FIFO at
#   once, before its first request; once it has gone they stay so for
#   throttle-rt-hold, not less, and then every thread is SCHED_OTHER;
# - a client of another uid (nobody) that calls itself nbd-client, on
#   a socket it may write to, changes nothing, over Unix or loopback
#   TCP; a server running as nobody takes its own uid's nbd-client;
# - a client of root that is not nbd-client (python3, or any loopback
#   TCP peer of root) turns real-time only under memory pressure, and
#   stays so for the hold after it left; memory pressure with only
#   nobody's client connected changes nothing;
# - set rt on|off|auto (control socket and throttle-ctl) and stats;
# - throttle-rt=off never, throttle-rt=on always.
# Memory pressure is read from this test's own cgroup
# (throttle-rt-pressure=its memory.pressure), where only the test's
# memory hog runs: no stall elsewhere on the machine can change what is
# asserted here (nor can the hog's stalls, which count machine-wide
# too, change another test's: test-guards.sh reads an idle cgroup's).

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

requires_file "$THROTTLE_FILTER"
requires "$PY" -c 'import nbd'
requires setpriv --version
requires_root "clients of other uids, cgroups, SCHED_FIFO"
probe_rt ||
    fail "SCHED_FIFO is refused here: the test needs CAP_SYS_NICE and real-time throttling on"
[ -e /proc/pressure/memory ] ||
    fail "no /proc/pressure/memory (a kernel without PSI, or psi=0): boot with PSI"
: "${THROTTLE_CTL:?}"
requires_file "$THROTTLE_CTL"

HOLD=2
NOBODY=65534

# This test's cgroup in the cgroup2 hierarchy: its memory.pressure is
# the servers' pressure signal.  The memory limit that makes the hog
# stall is cgroup2's memory.max where the memory controller is there,
# else cgroup v1's.
cg2root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$cg2root" ] || fail "no cgroup2 mount: needed for a memory.pressure of the test's own"
cg2=$cg2root/throttle-rt.$$
cgv1=
mkdir "$cg2" || fail "cannot create $cg2"
cleanup_cg ()
{
  local d
  rm -rf "${pub:-/nonexistent}"
  for d in "$cg2" "$cgv1"; do
    [ -n "$d" ] && [ -d "$d" ] && rmdir "$d" 2>/dev/null
  done
  :
}
trap '_rc=$?; cleanup_cg; (exit $_rc); _cleanup' EXIT
psi=$cg2/memory.pressure
[ -e "$psi" ] || fail "$psi does not exist"
if [ -e "$cg2/memory.max" ]; then
  echo 16M > "$cg2/memory.max"
elif [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/throttle-rt.$$"; then
  cgv1=/sys/fs/cgroup/memory/throttle-rt.$$
  echo 16M > "$cgv1/memory.limit_in_bytes"
else
  fail "cannot limit memory (no memory.max in $cg2, no cgroup v1 memory controller)"
fi

# What clients of another uid must reach: the sockets, the client, the
# nbd-client name (the same interpreter: /proc/PID/comm is
# "nbd-client").
pub=$(mktemp -d /tmp/throttle-rt.XXXXXX)
chmod 755 "$pub"
ln -s "$PY" "$pub/nbd-client"

# client.py URI NBDKIT_PID WANT [hold]: prints its own PID, then,
# after one write and once nbdkit has WANT threads (its 4 workers
# exist), the policy (field 41 of stat) of every nbdkit thread but the
# watcher on one line.  With "hold" it then waits for a line on stdin.
# Last it prints the time (CLOCK_REALTIME) just before it disconnects.
cat > "$pub/client.py" <<'EOF'
import nbd, os, sys, time
print(os.getpid(), flush=True)
task = "/proc/%s/task" % sys.argv[2]
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(bytearray(4096), 0)
for _ in range(200):
    if len(os.listdir(task)) >= int(sys.argv[3]):
        break
    time.sleep(0.05)
pol = []
for t in sorted(os.listdir(task)):
    try:
        if open("%s/%s/comm" % (task, t)).read().strip() == "throttle-psi":
            continue
        pol.append(open("%s/%s/stat" % (task, t)).read().rsplit(")", 1)[1].split()[38])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
print(" ".join(pol), flush=True)
if len(sys.argv) > 4:
    sys.stdin.readline()
print("%.6f" % time.time(), flush=True)
h.shutdown()
EOF
chmod 644 "$pub/client.py"

# policies_now: the policies of nbdkit's threads but the watcher's
# (named throttle-psi, real-time from the start).
policies_now ()
{
  local t c
  for t in /proc/$pid/task/*; do
    # A thread may exit meanwhile.
    c=$(cat "$t/comm" 2>/dev/null) || continue
    [ "$c" = throttle-psi ] && continue
    sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f39
  done | tr '\n' ' '
}
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

# expect WANT POLICIES: all 0 (other) or all 1 (fifo); MIN (6: main,
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
  [ $bad = 0 ] || {
    cat "$log"
    for p in /proc/$pid/task/*; do
      echo "thread ${p##*/} $(cat "$p/comm" 2>/dev/null) policy $(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f39)"
    done
    fail "$what: $bad of $n threads not policy $want: $*"
  }
}

# guards_set SOCK LOG: nbdkit serves SOCK and has logged its guards.
guards_set ()
{
  [ -S "$1" ] && grep -q 'throttle: guards: io-flusher' "$2"
}

# start NAME [--as-nobody] ARGS...: nbdkit on $pub/NAME.sock (mode 0666:
# any local user may connect), logging to $tmp/NAME.log; sets $pid,
# $uri, $log, $ctl (its control socket) and $idle (its thread count).
start ()
{
  local name=$1 sock filter env=(); shift
  local wrap=()
  if [ "${1:-}" = --as-nobody ]; then
    shift
    # Only CAP_SYS_NICE kept (ambient): SCHED_FIFO, nothing else.
    mkdir -m 700 "$pub/$name.d"
    chown $NOBODY "$pub/$name.d"
    chmod 711 "$pub/$name.d"
    sock=$pub/$name.d/sock
    # The build directory may be one nobody cannot enter (a mktemp
    # directory, mode 0700): the server gets copies it can read, and
    # a sanitizer build's reports go where it can write, to be moved
    # where _cleanup checks them once it has stopped.
    filter=$pub/$name.d/filter.so
    cp "$THROTTLE_FILTER" "$filter"
    chmod 644 "$filter"
    env=(THROTTLE_FILTER="$filter")
    if [ -n "${SANITIZER_SHIM:-}" ] && [ -f "$SANITIZER_SHIM" ]; then
      cp "$SANITIZER_SHIM" "$pub/$name.d/shim.so"
      chmod 644 "$pub/$name.d/shim.so"
      env+=(SANITIZER_SHIM="$pub/$name.d/shim.so")
    fi
    if [ -n "${THROTTLE_SANITIZER_LOGS:-}" ]; then
      nobody_logs=$pub/$name.d/sanitizer-logs
      mkdir -m 700 "$nobody_logs"
      chown $NOBODY "$nobody_logs"
      env+=(THROTTLE_SANITIZER_LOGS="$nobody_logs")
    fi
    wrap=(env "${env[@]}"
          setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups
          --inh-caps=+sys_nice --ambient-caps=+sys_nice)
  else
    sock=$pub/$name.sock
    filter=$THROTTLE_FILTER
  fi
  ctl=$(dirname "$sock")/$name.ctl
  log=$tmp/$name.log
  "${wrap[@]}" "$NBDKIT" -f -v -U "$sock" -D throttle.verbose=1 --threads=4 \
    --filter="$filter" memory 64M throttle-control="$ctl" \
    throttle-rt-hold=$HOLD throttle-rt-pressure="$psi" "$@" > "$log" 2>&1 &
  pid=$!
  _pids+=("$pid")
  # The guards are set in after_fork, after the socket exists.
  local r=0
  wait_until 10 "$pid" guards_set "$sock" "$log" || r=$?
  case $r in
    1) cat "$log"; fail "nbdkit $name exited" ;;
    2) cat "$log"; fail "nbdkit $name: no guards line in 10 s" ;;
  esac
  chmod 666 "$sock"
  uri="nbd+unix:///?socket=$sock"
  idle=$(ls /proc/$pid/task | wc -l)
}

# connect AS CLIENT [hold]: runs CLIENT (python3 or nbd-client) as AS
# (root or nobody) against $uri, once the threads of an earlier
# connection are gone; sets $cpid and $pols, and with hold leaves it
# connected (coproc; release with release_client).  Else sets $t_close.
connect ()
{
  local as=$1 client=$2 hold=${3:-} wrap=()
  [ "$as" = nobody ] && wrap=(setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups)
  for _ in $(seq 100); do
    [ "$(ls /proc/$pid/task | wc -l)" -le "$idle" ] && break
    sleep 0.05
  done
  cpid= pols=
  if [ -n "$hold" ]; then
    coproc CLIENT { "${wrap[@]}" "$client" "$pub/client.py" "$uri" "$pid" $((idle + 5)) hold; }
    read -r -t 30 cpid <&"${CLIENT[0]}" || :
    read -r -t 30 pols <&"${CLIENT[0]}" || :
  else
    { read -r cpid; read -r pols; read -r t_close; } < <(
      timeout 30 "${wrap[@]}" "$client" "$pub/client.py" "$uri" "$pid" $((idle + 5)))
  fi
  [ -n "$pols" ] || { cat "$log"; fail "$what: the client failed"; }
}
release_client ()
{
  echo >&"${CLIENT[1]}"
  read -r -t 30 t_close <&"${CLIENT[0]}" || fail "$what: the held client did not end"
  wait "$CLIENT_PID" 2>/dev/null || :
}

# rt_ctl LINE...: the current server's control socket.
rt_ctl ()
{
  ctl_send "$ctl" "$@"
}
# rt_field FIELD: a member of the stats' "rt" object, as JSON.
rt_field ()
{
  rt_ctl stats | "$PY" -c 'import json, sys; print(json.dumps(json.loads(sys.stdin.readline())["rt"][sys.argv[1]]))' "$1"
}

# wait_log PATTERN SECS: until the log has a line matching PATTERN.
wait_log ()
{
  local i
  for i in $(seq $(($2 * 10))); do
    grep -q "$1" "$log" && return 0
    sleep 0.1
  done
  return 1
}

# hog: makes the test's cgroup stall on memory: 16 MiB writing and
# reading back 200 MiB of page cache (about 0.5 s of "some" stall on a
# 2-core machine; the filter's trigger is 20 ms in 2 s).
hog ()
{
  sh -c 'echo $$ > "$1/cgroup.procs" &&
         { [ -z "$2" ] || echo $$ > "$2/cgroup.procs"; } &&
         dd if=/dev/zero of="$3" bs=1M count=200 status=none &&
         cat "$3" > /dev/null' sh "$cg2" "$cgv1" "$pub/fill" ||
    fail "the memory hog failed"
  rm -f "$pub/fill"
}

# --- auto over a Unix socket ---------------------------------------------
start auto
what="auto"
grep -q 'SCHED_FIFO on demand' "$log" ||
  { cat "$log"; fail "auto: the debug output does not say SCHED_FIFO on demand"; }
MIN=1 expect 0 $(policies_now)
[ "$(watcher_policy)" = 1 ] ||
  fail "auto: the watcher is not SCHED_FIFO: $(watcher_policy)"
[ "$(rt_field on)" = false ] && [ "$(rt_field mode)" = '"auto"' ] ||
  fail "auto: stats say on=$(rt_field on) mode=$(rt_field mode)"

what="auto: nobody's nbd-client"
connect nobody "$pub/nbd-client"
expect 0 $pols
grep -q "peer PID $cpid is nbd-client, uid $NOBODY, neither root nor the server's uid: never real-time" "$log" ||
  { cat "$log"; fail "$what: no debug line on peer $cpid"; }
grep 'guards: real-time on:' "$log" && fail "$what: real-time on"
echo "$what: all threads SCHED_OTHER"

what="auto: root's python3"
connect root "$PY"
expect 0 $pols
grep -q "peer PID $cpid is python3, uid 0, not a kernel nbd client" "$log" ||
  { cat "$log"; fail "$what: no debug line on peer $cpid"; }
grep 'guards: real-time on:' "$log" && fail "$what: real-time on"
echo "$what: all threads SCHED_OTHER"

what="auto: root's nbd-client"
connect root "$pub/nbd-client" hold
expect 1 $pols
grep -q "real-time on: peer PID $cpid is nbd-client, uid 0, a kernel nbd client on this machine: SCHED_FIFO set on [1-9]" "$log" ||
  { cat "$log"; fail "$what: no debug line naming peer $cpid"; }
# Every thread, also those that served no request.
MIN=2 expect 1 $(policies_now)
[ "$(rt_field on)" = true ] && [ "$(rt_field peers)" = '{"kernel": 1, "trusted": 0, "other": 0}' ] ||
  fail "$what: stats say on=$(rt_field on) peers=$(rt_field peers)"
release_client
echo "$what: real-time while connected"
# Not before the hold is over, and then every thread.
what="auto: after root's nbd-client left"
wait_log 'guards: real-time off:' $((HOLD + 20)) ||
  { cat "$log"; fail "$what: still real-time $((HOLD + 20)) s after it left"; }
t_off=$(sed -n 's/.*real-time off: .* at \([0-9.]*\)$/\1/p' "$log" | tail -1)
awk -v a="$t_off" -v b="$t_close" -v h=$HOLD 'BEGIN { exit !(a - b >= h) }' ||
  fail "$what: real-time off at $t_off, less than $HOLD s after the client's disconnect at $t_close"
MIN=2 expect 0 $(policies_now)
[ "$(rt_field on)" = false ] || fail "$what: stats say on=$(rt_field on)"
echo "$what: off $(awk -v a="$t_off" -v b="$t_close" 'BEGIN { printf "%.2f", a - b }') s after the client's disconnect (hold $HOLD s)"

# --- set rt ------------------------------------------------------------------
what="set rt on"
"$THROTTLE_CTL" "$ctl" set rt on | grep -q '^real-time on (mode on): set rt on' ||
  fail "$what: throttle-ctl did not say real-time on"
MIN=2 expect 1 $(policies_now)
connect root "$PY"
expect 1 $pols
"$THROTTLE_CTL" "$ctl" stats | grep -q '^real-time on (mode on)' ||
  fail "$what: throttle-ctl stats lack the real-time line"
what="set rt off"
connect root "$pub/nbd-client" hold
"$THROTTLE_CTL" "$ctl" set rt off | grep -q '^real-time off (mode off): throttle-rt=off' ||
  fail "$what: throttle-ctl did not say real-time off"
MIN=2 expect 0 $(policies_now)
what="set rt auto"
"$THROTTLE_CTL" --json "$ctl" set rt auto | grep -q '"mode":"auto","on":true' ||
  fail "$what: with a kernel client connected, not on"
MIN=2 expect 1 $(policies_now)
release_client
rc=0; "$THROTTLE_CTL" "$ctl" set rt maybe 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "throttle-ctl set rt maybe: exit $rc, not 2"
rt_ctl "set rt maybe" | grep -q 'set rt: bad mode \\"maybe\\": expected on, off or auto' ||
  fail "set rt maybe: no error naming the mode"
echo "set rt on, off, auto: done; bad modes refused"
stop_nbdkit $pid

# --- a server running as nobody: its own uid's nbd-client --------------------
start own --as-nobody
what="own uid: nobody's nbd-client, server nobody"
connect nobody "$pub/nbd-client"
expect 1 $pols
grep -q "real-time on: peer PID $cpid is nbd-client, uid $NOBODY, a kernel nbd client" "$log" ||
  { cat "$log"; fail "$what: no debug line naming peer $cpid"; }
echo "$what: real-time"
stop_nbdkit $pid
if [ -n "${nobody_logs:-}" ]; then
  mkdir -p "$THROTTLE_SANITIZER_LOGS"
  cp -r "$nobody_logs"/. "$THROTTLE_SANITIZER_LOGS"/
fi

# --- loopback TCP ------------------------------------------------------------
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$tmp/tcp.log
"$NBDKIT" -f -v -D throttle.verbose=1 --threads=4 -i 127.0.0.1 -p "$port" \
  --filter="$THROTTLE_FILTER" memory 64M throttle-rt-pressure="$psi" \
  > "$log" 2>&1 &
pid=$!
_pids+=("$pid")
wait_log 'throttle: guards: io-flusher' 10 || { cat "$log"; fail "tcp: nbdkit did not start"; }
idle=$(ls /proc/$pid/task | wc -l)
uri="nbd://127.0.0.1:$port/"
what="tcp: nobody's nbd-client"
connect nobody "$pub/nbd-client"
expect 0 $pols
grep -q "TCP peer 127.0.0.1 port [0-9]* on loopback, uid $NOBODY, neither root nor the server's uid" "$log" ||
  { cat "$log"; fail "$what: no debug line on its uid"; }
what="tcp: root's python3"
connect root "$PY"
expect 0 $pols
grep -q "TCP peer 127.0.0.1 port [0-9]* on loopback, uid 0, which may be a kernel nbd client (real-time only under memory pressure)" "$log" ||
  { cat "$log"; fail "$what: no debug line on its uid"; }
grep 'guards: real-time on:' "$log" && fail "tcp: real-time on"
echo "tcp: loopback peers of nobody and root: SCHED_OTHER (root's would be real-time under pressure)"
stop_nbdkit $pid

# --- off and on ----------------------------------------------------------------
start off throttle-rt=off
what="off"
connect root "$pub/nbd-client"
expect 0 $pols
grep 'guards: real-time on:' "$log" && fail "off: real-time on"
rt_ctl "set rt on" | grep -q 'this server cannot be real-time' ||
  fail "off: set rt on not refused"
stop_nbdkit $pid
echo "off: nbd-client: all threads SCHED_OTHER; set rt on refused"

start on throttle-rt=on
what="on"
MIN=2 expect 1 $(policies_now)
grep -q 'real-time on: throttle-rt=on: SCHED_FIFO set' "$log" || { cat "$log"; fail "on: no 'SCHED_FIFO set'"; }
connect nobody "$PY"
expect 1 $pols
stop_nbdkit $pid
echo "on: all threads SCHED_FIFO from the start"

# --- auto: memory pressure ---------------------------------------------------
# A hold far longer than the test: once on, nothing turns it off while
# the threads are read (the end of a hold is checked above, and on a
# simulated clock in test-rtpolicy.c).
HOLD=3600 start pressure
what="pressure: nobody's client only"
connect nobody "$pub/nbd-client" hold
expect 0 $pols
for i in $(seq 10); do
  hog
  wait_log 'memory pressure .* ignored' 3 && break
done
grep -q 'memory pressure .* ignored: no client of root or the server' "$log" ||
  { cat "$log"; grep . "$psi"; fail "$what: the trigger never fired ($i hog runs)"; }
grep 'guards: real-time on:' "$log" && fail "$what: real-time on"
MIN=2 expect 0 $(policies_now)
release_client
echo "$what: the trigger fired (after $i hog runs), not real-time"

# A stall of the hog runs above may still fire the trigger once this
# client is connected: that counts too, and the log says so either way.
what="pressure: root's python3 connected"
connect root "$PY" hold
for i in $(seq 10); do
  hog
  wait_log 'guards: real-time on: memory pressure' 3 && break
done
grep -q 'real-time on: memory pressure (PSI trigger' "$log" ||
  { cat "$log"; grep . "$psi"; fail "$what: memory pressure did not turn real-time on"; }
MIN=2 expect 1 $(policies_now)
echo "$what: $(grep -o 'real-time on: .*' "$log") (after $i hog runs)"
release_client
off_in=$(rt_field off_in_s)
awk -v t="$off_in" 'BEGIN { exit !(t > 0 && t <= 3600) }' ||
  fail "$what: after the client left, stats say off_in_s=$off_in, not a running hold"
MIN=2 expect 1 $(policies_now)
echo "$what: still real-time after the client left, off in $off_in s (the hold)"
stop_nbdkit $pid
