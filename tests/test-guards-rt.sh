#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Who may make nbdkit's threads real-time, and that they turn back (see
# REAL-TIME PRIORITY in nbdkit-throttle-design(1)):
# - a client of root named nbd-client makes every thread SCHED_FIFO at
#   once, before its first request; once it has gone they stay so for
#   throttle-rt-hold, not less, and then every thread is SCHED_OTHER;
# - a client of another uid (nobody) that calls itself nbd-client, on
#   a socket it may write to, changes nothing; a server running as
#   nobody takes its own uid's nbd-client, and holds real-time after
#   it left (stats and throttle-ctl say when it ends);
# - a client of root that is not nbd-client (python3), or root's
#   nbd-client over loopback TCP, changes nothing;
# - set rt on|off|auto (control socket and throttle-ctl) and stats;
# - throttle-rt=off never, throttle-rt=on always.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

requires_file "$THROTTLE_FILTER"
requires "$PY" -c 'import nbd'
requires setpriv --version
requires_root "clients of other uids, SCHED_FIFO"
probe_rt ||
    fail "SCHED_FIFO is refused here: the test needs CAP_SYS_NICE and real-time throttling on"
: "${THROTTLE_CTL:?}"
requires_file "$THROTTLE_CTL"

HOLD=2
NOBODY=65534

trap '_rc=$?; rm -rf "${pub:-/nonexistent}"; (exit $_rc); _cleanup' EXIT

# What clients of another uid must reach: the sockets, the client, the
# nbd-client name (the same interpreter: /proc/PID/comm is
# "nbd-client").
pub=$(mktemp -d /tmp/throttle-rt.XXXXXX)
chmod 755 "$pub"
ln -s "$PY" "$pub/nbd-client"

# client.py URI NBDKIT_PID WANT [hold]: prints its own PID, then,
# after one write and once nbdkit has WANT threads (its 4 workers
# exist), the policy (field 41 of stat) of every nbdkit thread on one
# line.  With "hold" it then waits for a line on stdin.
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

# policies_now: the policies of nbdkit's threads (one may exit
# meanwhile).
policies_now ()
{
  local t
  for t in /proc/$pid/task/*; do
    sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f39
  done | tr '\n' ' '
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
    throttle-rt-hold=$HOLD "$@" > "$log" 2>&1 &
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

# --- auto over a Unix socket ---------------------------------------------
start auto
what="auto"
grep -q 'SCHED_FIFO on demand' "$log" ||
  { cat "$log"; fail "auto: the debug output does not say SCHED_FIFO on demand"; }
MIN=1 expect 0 $(policies_now)
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
grep -q "peer PID $cpid is python3, uid 0, not a kernel nbd client: real-time off" "$log" ||
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
[ "$(rt_field on)" = true ] && [ "$(rt_field peers)" = '{"kernel": 1, "other": 0}' ] ||
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
# A hold far longer than the test: once the client has left, nothing
# turns real-time off while the threads and the stats are read (the
# end of a hold is checked above, and on a simulated clock in
# test-rtpolicy.c).
HOLD=3600 start own --as-nobody
what="own uid: nobody's nbd-client, server nobody"
connect nobody "$pub/nbd-client"
expect 1 $pols
grep -q "real-time on: peer PID $cpid is nbd-client, uid $NOBODY, a kernel nbd client" "$log" ||
  { cat "$log"; fail "$what: no debug line naming peer $cpid"; }
echo "$what: real-time"
what="own uid: after its nbd-client left"
# nbdkit closes the connection after the client's exit.
for _ in $(seq 100); do
  off_in=$(rt_field off_in_s)
  [ "$off_in" != null ] && break
  sleep 0.1
done
MIN=2 expect 1 $(policies_now)
awk -v t="$off_in" 'BEGIN { exit !(t > 0 && t <= 3600) }' ||
  fail "$what: stats say off_in_s=$off_in, not a running hold"
"$THROTTLE_CTL" "$ctl" stats | grep -q '^real-time on (mode auto): .*; off in [0-9.]* s unless a kernel client connects$' ||
  fail "$what: throttle-ctl stats do not say when the hold ends"
echo "$what: still real-time, off in $off_in s (the hold)"
stop_nbdkit $pid
if [ -n "${nobody_logs:-}" ]; then
  mkdir -p "$THROTTLE_SANITIZER_LOGS"
  cp -r "$nobody_logs"/. "$THROTTLE_SANITIZER_LOGS"/
fi

# --- loopback TCP ------------------------------------------------------------
# Which process holds the other end of a TCP socket cannot be known:
# even root's nbd-client is served as any client (throttle-rt=on
# serves one that attaches over TCP).
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$tmp/tcp.log
"$NBDKIT" -f -v -D throttle.verbose=1 --threads=4 -i 127.0.0.1 -p "$port" \
  --filter="$THROTTLE_FILTER" memory 64M > "$log" 2>&1 &
pid=$!
_pids+=("$pid")
wait_log 'throttle: guards: io-flusher' 10 || { cat "$log"; fail "tcp: nbdkit did not start"; }
idle=$(ls /proc/$pid/task | wc -l)
uri="nbd://127.0.0.1:$port/"
what="tcp: root's nbd-client"
connect root "$pub/nbd-client"
expect 0 $pols
grep -q "throttle-rt peer: peer of address family 2, not a Unix socket: never real-time: real-time off" "$log" ||
  { cat "$log"; fail "$what: no debug line on its address"; }
grep 'guards: real-time on:' "$log" && fail "$what: real-time on"
echo "$what: SCHED_OTHER"
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
