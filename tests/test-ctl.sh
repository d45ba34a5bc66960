#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-ctl against a real nbdkit under load: stats as a table and as
# the raw reply, set capacity with nbdkit's size suffixes (the change
# shows in the server's own reply; the filter and both tools refuse the
# same sizes), set latency-target and the target's
# column, watch's rates, odd export names
# round-trip; and each failure an operator meets gets its own clear
# message and exit status: a command-line mistake (2, nothing sent), no
# socket, not a socket, a stale socket, permission denied, a server that
# answers garbage, the wrong JSON, nothing (timeout) or closes, an NBD
# socket, and a server that goes away under watch (1).
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
: "${THROTTLE_CTL:?THROTTLE_CTL must point to the built throttle-ctl}"
: "${THROTTLE_LOAD:?THROTTLE_LOAD must point to the built throttle-load}"
requires_file "$THROTTLE_FILTER"
requires_file "$THROTTLE_CTL"
requires_file "$THROTTLE_LOAD"
requires $PY -c 'import nbd'

CTL=$THROTTLE_CTL
ctl=$tmp/ctl.sock

# expect RC PATTERN ARGS...: throttle-ctl ARGS exits RC with PATTERN in
# its output (stdout and stderr together).
expect ()
{
  local rc=$1 pattern=$2 r=0; shift 2
  timeout 20 "$CTL" "$@" >"$tmp/out" 2>&1 || r=$?
  [ "$r" = "$rc" ] || { cat "$tmp/out"; fail "throttle-ctl $*: exit $r, expected $rc"; }
  grep -q -- "$pattern" "$tmp/out" ||
    { cat "$tmp/out"; fail "throttle-ctl $*: no '$pattern' in the output"; }
  echo "ok: throttle-ctl $* -> $r: $(grep -m1 -- "$pattern" "$tmp/out")"
}

# --- mistakes on the command line: status 2, before any connection ---
expect 2 "no SOCKET" 
expect 2 "no command" "$tmp/none"
expect 2 'unknown command "frob"' "$tmp/none" frob
expect 2 'bad size "1.5M": unknown suffix' "$tmp/none" set capacity "" 1.5M
expect 2 'bad size "1MiB": unknown suffix' "$tmp/none" set capacity "" 1MiB
expect 2 'bad size "abc"' "$tmp/none" set capacity "" abc
expect 2 'bad size "-1"' "$tmp/none" set capacity "" -- -1
# A negative size is a bad size, not an unknown option -1; and a
# mistake is one line and where to read more, not the whole usage.
expect 2 'bad size "-1": negative' "$tmp/none" set capacity "" -1
[ "$(wc -l < "$tmp/out")" = 2 ] &&
  [ "$(tail -n 1 "$tmp/out")" = "Try 'throttle-ctl --help' for more information." ] ||
  { cat "$tmp/out"; fail "a usage error is not one line and 'Try throttle-ctl --help'"; }
expect 2 "^Try 'throttle-ctl --help' for more information.$" --frobnicate "$tmp/none" stats
[ "$(wc -l < "$tmp/out")" = 2 ] ||
  { cat "$tmp/out"; fail "an unknown option: not getopt's line and the Try line"; }
expect 2 'bad size "-5M": negative' "$tmp/none" set server-capacity -5M
expect 2 'must be greater than 0' "$tmp/none" set capacity "" 0
expect 2 'too large' "$tmp/none" set capacity "" 9E
expect 2 'usage: set capacity EXPORT SIZE' "$tmp/none" set capacity ""

# --- one size grammar: the filter (nbdkit_parse_size), throttle-ctl and
# throttle-load (lib/throttle-size.c) refuse the same sizes (the values
# are tests/test-size.c's).  "accepts" here: not refused as not a size
# (0 is a size the capacity's range then refuses; throttle-ctl has
# nothing to send to at $tmp/none, throttle-load nothing to connect to).
for size in "" " " "4KiB" "4KB" "1.5M" "-1" "- 1" "+" "16E" "8E" "8192P" \
    "8589934592G" "9223372036854775808" "0x10" "1 1" "1M " "garbage" "1X" \
    "-0" "0" "+1" " 08" "1s" "2S" "1b" "4k" "64M" "1T" "1P" "7E" \
    "9223372036854775807"; do
  filter=accepts ctl=accepts load=accepts
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
    "throttle-capacity=$size" --run true >"$tmp/out" 2>&1 || :
  ! grep -qF -- "throttle-capacity=$size: not a size" "$tmp/out" ||
    filter=refuses
  timeout 20 "$CTL" -- "$tmp/none" set capacity "" "$size" >"$tmp/out" 2>&1 || :
  ! grep -qF -- "bad size \"$size\": " "$tmp/out" ||
    grep -q "must be greater than 0" "$tmp/out" || ctl=refuses
  timeout 20 "$THROTTLE_LOAD" --offset "$size" -t 1 --unix "$tmp/none" \
    >"$tmp/out" 2>&1 || :
  ! grep -qF -- "--offset: '$size' is not a size" "$tmp/out" || load=refuses
  [ "$filter" = "$ctl" ] && [ "$ctl" = "$load" ] ||
    fail "size \"$size\": the filter $filter it, throttle-ctl $ctl it, throttle-load $load it"
  echo "ok: size \"$size\": all three $filter it"
done
# Durations: nbdkit_parse_delay's grammar (lib/throttle-duration.h), a
# plain number being seconds; the latency target at most an hour.
expect 2 'bad duration "3601": expected a duration of at most 1 hour' \
  "$tmp/none" set latency-target "" 3601
expect 2 'bad duration "5m": expected a duration' \
  "$tmp/none" set latency-target "" 5m
expect 2 'bad duration "2h": expected a duration' \
  "$tmp/none" set latency-target "" 2h
expect 2 'bad duration "0ms": must be greater than 0 (off for no target)' \
  "$tmp/none" set latency-target "" 0ms
expect 2 'or set latency-target EXPORT DURATION|off' \
  "$tmp/none" set latency-target ""
expect 2 'bad INTERVAL "0"' "$tmp/none" watch 0
expect 2 'bad INTERVAL "5ms"' "$tmp/none" watch 5ms
expect 2 'bad INTERVAL "1x"' "$tmp/none" watch 1x
expect 2 'bad COUNT "x"' "$tmp/none" watch 1 x
expect 2 'too many arguments' "$tmp/none" stats a b
expect 2 '\-\-timeout abc' --timeout abc "$tmp/none" stats

# --- sockets that are not a live control socket: status 1 --------------
expect 1 "no such socket (is nbdkit running with throttle-control=$tmp/none?)" \
  "$tmp/none" stats
echo text > "$tmp/file"
expect 1 "$tmp/file: not a socket" "$tmp/file" stats
# A stale socket: bound, then its server gone without removing it.
$PY -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
  "$tmp/stale.sock"
expect 1 "connection refused: nobody serves this socket" "$tmp/stale.sock" stats

# Fake servers of other protocols, one connection each.
cat > "$tmp/fake.py" <<'EOF'
import socket, sys, time
mode, path = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(1)
c, _ = s.accept()
c.recv(100)
if mode == "garbage":
    c.sendall(b"hello there\n")
elif mode == "json":
    c.sendall(b'{"foo":1}\n')
elif mode == "trailing":
    c.sendall(b'{"exports":[]} x\n')
elif mode == "partial":
    c.sendall(b'{"metric":"bytes"')
elif mode == "silent":
    time.sleep(120)
c.close()
EOF
fake ()
{
  local mode=$1 i
  rm -f "$tmp/fake.sock"
  $PY "$tmp/fake.py" "$mode" "$tmp/fake.sock" &
  _pids+=($!)
  wait_for_socket "$tmp/fake.sock" $! || fail "the fake server did not start"
}
fake garbage
expect 1 'the reply is not JSON (unexpected character at byte 0): "hello there"' \
  "$tmp/fake.sock" stats
fake json
expect 1 'the reply has no "exports" array: not a throttle control socket' \
  "$tmp/fake.sock" stats
fake trailing
expect 1 'the reply is not JSON (unexpected character at byte 15)' \
  "$tmp/fake.sock" stats
fake partial
expect 1 'closed the connection in the middle of a reply (17 bytes' \
  "$tmp/fake.sock" stats
fake close
expect 1 'closed the connection without a reply' "$tmp/fake.sock" stats
# Its own timeout ends the wait, not the server: the silent server is
# still there when throttle-ctl has given up (and expect's 'timeout 20'
# would have killed a throttle-ctl that waited on; no wall-clock bound,
# which a loaded machine breaks).
fake silent
silent_pid=$!
expect 1 'no reply within 1 s' --timeout 1s "$tmp/fake.sock" stats
kill -0 "$silent_pid" 2>/dev/null ||
  fail "the silent server was gone before throttle-ctl's 1 s timeout ended its wait"
kill "$silent_pid" 2>/dev/null; wait "$silent_pid" 2>/dev/null || :

# --- a real server ------------------------------------------------------
# Writes take 20 ms in the backend, so 2 x 8 writes of 64K keep the 256K
# budget full and requests waiting.  An odd name has a budget of its
# own while a connection to it is open.
name='a b"c\d'
start_nbdkit srv --filter="$THROTTLE_FILTER" \
  --filter=delay memory 1G delay-write=20ms throttle-capacity=256K \
  throttle-control="$ctl" throttle-rt=off
srv=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket"

# The NBD socket is not the control socket.
expect 1 'not a throttle control socket' "$tmp/srv.sock" stats
# Permission denied: the socket is 0600, owned by whoever runs nbdkit.
if [ "$(id -u)" = 0 ]; then
  chmod 755 "$tmp"
  r=0
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    "$CTL" "$ctl" stats >"$tmp/out" 2>&1 || r=$?
  cat "$tmp/out"
  [ $r = 1 ] && grep -q "$ctl: permission denied (the control socket has mode 0600" "$tmp/out" ||
    fail "another user: exit $r, no 'permission denied'"
  echo "ok: another user gets 'permission denied'"
  chmod 700 "$tmp"
else
  mkdir "$tmp/locked"
  ln "$ctl" "$tmp/locked/ctl.sock" 2>/dev/null || cp -a "$ctl" "$tmp/locked/"
  chmod 000 "$tmp/locked"
  expect 1 "permission denied" "$tmp/locked/ctl.sock" stats
  chmod 700 "$tmp/locked"
fi

# Before any client: the default export's budget, which can be set.
expect 0 '^""  *256K  *0  *0  *0  *0 ' "$ctl" stats
expect 0 'export "": capacity 262144 (256K), was 262144 (256K)' \
  "$ctl" set capacity "" 256K
expect 1 'the server refused: unknown export "nosuch": it has no budget' \
  "$ctl" set capacity nosuch 1M

# set latency-target: the target shows in its own column, shown only
# while an export has one.  A plain number is seconds.
expect 0 'export "": latency target 0.005, was off' \
  "$ctl" set latency-target "" 0.005
expect 0 '^""  *256K  *5.0ms  *0 ' "$ctl" stats
grep -q '^EXPORT  *CAPACITY  *TARGET  *IN-FLIGHT ' "$tmp/out" ||
  { cat "$tmp/out"; fail "stats: no TARGET column with a target set"; }
expect 0 '"ok":true,"export":"","latency_target":"500us","previous_ns":5000000' \
  --json "$ctl" set latency-target "" 500us
expect 0 'export "": latency target off, was 500us' \
  "$ctl" set latency-target "" off
expect 1 'the server refused: unknown export "nosuch"' \
  "$ctl" set latency-target nosuch 5ms
expect 0 '^""  *256K  *0 ' "$ctl" stats
grep -q 'TARGET' "$tmp/out" &&
  { cat "$tmp/out"; fail "stats: a TARGET column without a target"; }

"$THROTTLE_LOAD" --unix "$tmp/srv.sock" -c 2 -q 8 -b 64k --read-ratio 0 \
  -t 6 >"$tmp/load.out" 2>&1 &
load=$!
_pids+=($load)
sleep 1

expect 0 '^""  *256K  *256K  *256K ' "$ctl" stats
grep -q '^EXPORT  *CAPACITY  *IN-FLIGHT  *PEAK  *WAITING  *ADMITTED  *WAITED  *CANCELLED  *CLAMPED  *MEAN-WAIT  *MAX-WAIT$' "$tmp/out" ||
  { cat "$tmp/out"; fail "stats: not the table's header"; }
expect 0 '"capacity":262144' --json "$ctl" stats ""
$PY -c 'import json, sys; r = json.load(open(sys.argv[1]))
assert r["exports"][0]["name"] == "" and r["exports"][0]["capacity"] == 262144, r' \
  "$tmp/out" || fail "stats --json: not the server's reply"
expect 1 'the server refused: unknown export "nosuch"' "$ctl" stats nosuch

# The swap verdict, as the server's reply has it: safe, or not with
# every reason, on a line of its own in stats.
expect 0 'safe for swap' "$ctl" stats
cp "$tmp/out" "$tmp/stats.out"
"$CTL" --json "$ctl" stats > "$tmp/stats.json" || fail "stats --json"
$PY - "$tmp/stats.json" "$tmp/stats.out" <<'EOF' || fail "stats: the swap verdict is not the server's"
import json, sys
sw = json.load(open(sys.argv[1]))["swap"]
lines = [l.rstrip("\n") for l in open(sys.argv[2]) if "safe for swap" in l]
if sw["safe"]:
    want = "safe for swap: every guard taken (throttle-swap=%s)" % sw["mode"]
else:
    want = "NOT safe for swap (throttle-swap=%s): " % sw["mode"] + "; ".join(
        "%s (%s)" % (k, v) for k, v in sw["unsafe"].items())
assert lines == [want], (lines, want)
print("ok: stats says: " + want)
EOF
verdict=$(grep 'safe for swap' "$tmp/stats.out")

# set capacity: the number sent is nbdkit's reading of the suffix, and
# the server's own reply shows it.
expect 0 'export "": capacity 1048576 (1M), was 262144 (256K)' \
  "$ctl" set capacity "" 1M
expect 0 '"capacity":1048576' --json "$ctl" stats
expect 0 'capacity 524288 (512K), was 1048576 (1M)' "$ctl" set capacity "" 512k
expect 0 '"ok":true,"export":"","capacity":8192,"previous":524288' \
  --json "$ctl" set capacity "" 16s
expect 0 'capacity 1048576 (1M), was 8192 (8K)' "$ctl" set capacity "" 1048576b
expect 1 'the server refused: unknown export "nosuch"' \
  "$ctl" set capacity nosuch 1M

# watch: a header, then one line per sample; after the first, requests
# are admitted at a rate and the capacity set above shows.
expect 0 '^TIME  *EXPORT  *CAPACITY  *IN-FLIGHT  *WAITING  *ADMIT/S  *WAITED/S  *MEAN-WAIT  *MAX-WAIT  *WB-PENDING$' \
  "$ctl" watch 300ms 4
cat "$tmp/out"
# The verdict, unchanged over the samples, once with the first.
[ "$(grep -c 'safe for swap' "$tmp/out")" = 1 ] &&
  [ "$(sed -n 2p "$tmp/out")" = "$(sed -n 2p "$tmp/out" | cut -c1-9)$verdict" ] ||
  fail "watch: the swap verdict is not said once, with the first sample"
[ "$(grep -c '^[0-9][0-9]:[0-9][0-9]:[0-9][0-9] ""  *1M ' "$tmp/out")" = 4 ] ||
  fail "watch 0.3 4: not 4 lines for the export at capacity 1M"
grep ' ""  ' "$tmp/out" | awk 'NR > 1 { if ($6 !~ /^[0-9]+$/ || $6 == 0) bad = 1 } END { exit NR != 4 || bad }' ||
  fail "watch: no admissions per second under load"
# The server-wide budget has its line in each sample, with its rates:
# none while "" is the only export (the server-wide bound cannot bind
# then, and nothing is charged to it: nbdkit-throttle-filter(1)).
grep '^[0-9:]* (server wide)  ' "$tmp/out" |
  awk 'NR > 1 { if ($7 != 0) bad = 1 } END { exit NR != 4 || bad }' ||
  fail "watch 0.3 4: not 4 server-wide lines, or admissions charged to the server with one export"
expect 0 '"exports"' --json "$ctl" watch 0.2 2
[ "$(grep -c '^{"metric"' "$tmp/out")" = 2 ] || fail "watch --json 0.2 2: not 2 replies"
wait $load || { cat "$tmp/load.out"; fail "the load failed"; }

# After the load: waits were counted and their mean is shown.
expect 0 '^""  *1M ' "$ctl" stats
awk '$1 == "\"\"" { if ($10 == "-" || $11 == "-") bad = 1 } END { exit bad }' \
  "$tmp/out" || fail "stats: no mean or max wait after a load that waited"

# An export name with a blank, a quote and a backslash round-trips,
# while a connection to it gives it its budget.
hold_exports "$tmp/srv.sock" odd "$name"
expect 0 '^"a b\\"c\\\\d"  *256K ' "$ctl" stats "$name"
expect 0 'export "a b\\"c\\\\d": capacity 131072 (128K), was 262144 (256K)' \
  "$ctl" set capacity "$name" 128K
expect 0 '"name":"a b\\"c\\\\d","capacity":131072' --json "$ctl" stats "$name"
kill $held; wait $held 2>/dev/null || :

# A server that goes away under watch ends it with status 1.
"$CTL" "$ctl" watch 0.2 >"$tmp/watch.out" 2>&1 &
w=$!
sleep 0.7
stop_nbdkit $srv
r=0
for i in $(seq 50); do kill -0 $w 2>/dev/null || break; sleep 0.1; done
kill -0 $w 2>/dev/null && fail "watch still running 5 s after the server stopped"
wait $w || r=$?
cat "$tmp/watch.out"
# Usually the socket is gone ("no such socket"); a connection that
# reached the listening socket's backlog while nbdkit was stopping the
# control thread is reset when nbdkit closes it (seen under ASan on a
# loaded machine).  Either way the server went away.
[ $r = 1 ] &&
  grep -Eq "no such socket|(reset|closed) the connection without a reply" \
    "$tmp/watch.out" ||
  fail "watch after the server stopped: exit $r, not a server gone away"
echo "ok: watch ends with status 1 when the server goes away"

# 151 exports, in the server's one reply: stats shows them all.
# One request thread per connection: 150 connections stay open.
start_nbdkit many --threads=1 --filter="$THROTTLE_FILTER" memory 1M \
  throttle-control="$tmp/many.ctl"
many=$pid
hold_exports "$tmp/many.sock" many $(seq -f 'n%g' 0 149)
expect 0 '^n149  *' "$tmp/many.ctl" stats
n=$(grep -c '^n[0-9]' "$tmp/out")
[ "$n" = 150 ] || fail "stats shows $n of the 150 open exports"
expect 0 '"exports_total":151' --json "$tmp/many.ctl" stats
[ "$(grep -c '^{"metric"' "$tmp/out")" = 1 ] ||
  fail "stats --json: not one line for 151 exports"
expect 0 '^[0-9:]*  *n149 ' "$tmp/many.ctl" watch 0.1 1
kill $held; wait $held 2>/dev/null || :
stop_nbdkit $many
echo "ok: 151 exports in one reply: stats and watch show every one"
echo "test-ctl: PASS"
