#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The server-wide bound (throttle-server-capacity): every charge to an
# export's budget is charged to the server's too, so two exports the
# plugin lists, each at a 1M capacity, have at most 1M in flight
# together at the backend by default, and at most the server's bound
# when it is set; bad values are refused at start and over the control
# socket, naming them; stats and throttle-ctl show the server's budget.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires_file "$THROTTLE_CTL"
requires $PY -c 'import nbd'

start_refused "throttle-server-capacity=0: must be greater than 0" \
    throttle-server-capacity=0
start_refused "throttle-server-capacity=lots: not a size" throttle-server-capacity=lots
start_refused "throttle-server-capacity=1000: below 4096" throttle-server-capacity=1000
start_refused "throttle-server-capacity=512K: below throttle-capacity=1M" \
    throttle-capacity=1M throttle-server-capacity=512K
"$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M throttle-capacity=1M \
  throttle-server-capacity=1M --run true >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "refused a server capacity equal to the capacity"; }

ctl=$tmp/ctl.sock
# load SOCKET: 2 connections to each of exports a and b, each keeping
# 8 writes of 256K in flight, 24 writes each; each export name has its
# own budget while connected (the listing first changes nothing).
load ()
{
  timeout 300 $PY - "$1" <<'EOF' || fail "the load failed"
import nbd, sys, threading
sock = sys.argv[1]
h = nbd.NBD()
h.set_opt_mode(True)
h.connect_unix(sock)
names = []
h.opt_list(lambda n, d: names.append(n) or 0)
h.opt_abort()
assert "a" in names and "b" in names, names
errors = []
def run(export, i):
    try:
        h = nbd.NBD()
        h.set_export_name(export)
        h.connect_unix(sock)
        buf = nbd.Buffer.from_bytearray(bytearray(262144))
        cookies = []
        for n in range(24):
            cookies.append(h.aio_pwrite(buf, (i * 24 + n) * 262144))
            while h.aio_in_flight() >= 8:
                h.poll(-1)
        while h.aio_in_flight() > 0:
            h.poll(-1)
        for c in cookies:
            h.aio_command_completed(c)
        h.shutdown()
    except Exception as e:
        errors.append("%s/%d: %s" % (export, i, e))
ts = [threading.Thread(target=run, args=(e, i))
      for e in ("a", "b") for i in range(2)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    sys.exit("FAIL: " + "; ".join(errors))
print("ok: 96 writes of 256K to exports a and b")
EOF
}

stats_field ()
{
  $PY -c 'import json, sys; r = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}

# --- the default: the server's bound is one export's -----------------------
for server in "" 2M; do
  rm -f "$ctl"
  start_nbdkit bound --threads=32 --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=20 export=a export=b statefile="$tmp/bound.state" \
    throttle-capacity=1M throttle-rt=off throttle-control="$ctl" \
    ${server:+throttle-server-capacity=$server}
  wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
  load "$tmp/bound.sock"
  ctl_send "$ctl" stats >"$tmp/stats.json"
  "$THROTTLE_CTL" "$ctl" stats >"$tmp/table" || fail "throttle-ctl stats failed"
  cat "$tmp/table"
  stop_nbdkit $pid
  peak=$(statefield "$tmp/bound.state" peak_bytes)
  bound=1048576
  [ -z "$server" ] || bound=2097152
  speak=$(stats_field 'r["server"]["peak"]' <"$tmp/stats.json")
  scap=$(stats_field 'r["server"]["capacity"]' <"$tmp/stats.json")
  sadm=$(stats_field 'r["server"]["admitted"]' <"$tmp/stats.json")
  # a's and b's budgets went with their connections: count the
  # backend's writes instead.
  eadm=$(statefield "$tmp/bound.state" writes)
  echo "server capacity $scap: backend peak $peak, server peak $speak, admitted $sadm (backend writes to a+b: $eadm)"
  [ "$scap" = "$bound" ] || fail "server capacity $scap, expected $bound"
  [ "$peak" -le "$bound" ] ||
    fail "the backend had $peak bytes in flight, above the server's bound $bound"
  [ "$speak" -le "$bound" ] || fail "server peak $speak above $bound"
  [ "$sadm" = "$eadm" ] && [ "$sadm" -ge 96 ] ||
    fail "the server admitted $sadm, the backend wrote $eadm"
  grep -q "^server-wide: capacity ${server:-1M}, in flight 0, peak " "$tmp/table" ||
    fail "throttle-ctl stats does not show the server-wide budget"
  # The unload summary has the server's line first.
  grep -q "throttle: summary server capacity=$bound in_flight=0 " "$tmp/bound.log" ||
    fail "no server summary line at unload"
done

# --- the control socket ------------------------------------------------------
rm -f "$ctl"
start_nbdkit live --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" delay-ms=1 \
  export=a throttle-capacity=1M throttle-server-capacity=2M throttle-rt=off \
  throttle-control="$ctl"
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
expect_ctl ()
{
  local pattern=$1 r; shift
  r=$(ctl_send "$ctl" "$@")
  echo "$* -> $r"
  echo "$r" | grep -q -- "$pattern" || fail "$*: expected '$pattern'"
}
expect_ctl '"server":{"capacity":2097152,"in_flight":0' stats
expect_ctl 'error.*capacity \\"4M\\": above the server-wide capacity 2097152' \
  'set capacity "" 4M'
expect_ctl '"ok":true,"export":"","capacity":2097152' 'set capacity "" 2M'
expect_ctl 'error.*server-capacity \\"1M\\": below the capacity 2097152 of export \\"\\"' \
  'set server-capacity 1M'
expect_ctl 'error.*server-capacity \\"100\\": below 4096' \
  'set server-capacity 100'
expect_ctl '"ok":true,"server_capacity":8388608,"previous":2097152' \
  'set server-capacity 8M'
expect_ctl '"server":{"capacity":8388608' stats
expect_ctl '"set server-capacity N"' help
# The capacity commands' refusals, from the filter itself (the
# protocol's unit test has its own commands).
expect_ctl 'error.*capacity \\"100\\": below 4096, the smallest capacity under throttle-metric=bytes' \
  'set capacity "" 100'
expect_ctl 'error.*the capacity must be greater than 0' 'set capacity "" 0'
# Under pages (or requests) a size suffix reads as bytes, so 1M would
# be 1048576 pages: refused at start and in set, with the reason.
start_refused "throttle-capacity=1M: under throttle-metric=pages the capacity counts pages, not bytes: 1M would be 1048576 pages (4 GiB); write the number of pages" \
    throttle-metric=pages throttle-capacity=1M
start_refused "throttle-server-capacity=1T: under throttle-metric=pages .*1099511627776 pages" \
    throttle-metric=pages throttle-server-capacity=1T
start_refused "throttle-capacity=4k: under throttle-metric=requests the capacity counts requests, not bytes" \
    throttle-metric=requests throttle-capacity=4k
start_refused "throttle-capacity=4096b: under throttle-metric=pages" \
    throttle-metric=pages throttle-capacity=4096b
live_pid=$pid
pctl=$tmp/pages.ctl
start_nbdkit pages --filter="$THROTTLE_FILTER" memory 1M throttle-metric=pages \
  throttle-capacity=256 throttle-rt=off throttle-control="$pctl"
wait_for_socket "$pctl" "$pid" || fail "no control socket at $pctl"
r=$(ctl_send "$pctl" 'set capacity "" 1M')
echo "set capacity \"\" 1M -> $r"
echo "$r" | grep -q 'error.*capacity \\"1M\\": under throttle-metric=pages the capacity counts pages, not bytes' ||
  fail "set capacity 1M under pages: not refused"
r=$(ctl_send "$pctl" 'set server-capacity 1G')
echo "set server-capacity 1G -> $r"
echo "$r" | grep -q 'error.*server-capacity \\"1G\\": under throttle-metric=pages' ||
  fail "set server-capacity 1G under pages: not refused"
r=$(ctl_send "$pctl" 'set capacity "" 512')
echo "$r" | grep -q '"ok":true' || fail "set capacity 512 under pages: $r"
# More pages than RAM could ever hold in flight: set, with the warning
# nbdkit gives at start (test-params.sh), in the reply.
r=$(ctl_send "$pctl" 'set server-capacity 1125899906842624')
echo "set server-capacity 2^50 -> $r"
echo "$r" | grep -q '"ok":true,"server_capacity":1125899906842624,.*"warning":"server-capacity \\"1125899906842624\\": above [0-9]* pages, the most this machine.s RAM .*never throttles"' ||
  fail "set server-capacity 2^50 pages: no warning"
r=$(ctl_send "$pctl" 'set capacity "" 1125899906842624')
echo "set capacity 2^50 -> $r"
echo "$r" | grep -q '"ok":true,.*"capacity":1125899906842624,.*"warning":"capacity \\"1125899906842624\\": above [0-9]* pages' ||
  fail "set capacity 2^50 pages: no warning"
"$THROTTLE_CTL" "$pctl" set capacity "" 1125899906842624 >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "throttle-ctl set capacity 2^50 pages"; }
cat "$tmp/out"
grep -q '^throttle-ctl: warning: capacity "1125899906842624": above .*never throttles' "$tmp/out" ||
  fail "throttle-ctl set capacity 2^50 pages: no warning"
r=$(ctl_send "$pctl" 'set capacity "" 512')
echo "$r" | grep -q '"ok":true' && ! echo "$r" | grep -q warning ||
  fail "set capacity 512 under pages: $r"
# throttle-ctl sends the suffix as typed, so the server can say why.
r=0; "$THROTTLE_CTL" "$pctl" set capacity "" 1M >"$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 1 ] && grep -q 'counts pages, not bytes' "$tmp/out" ||
  fail "throttle-ctl set capacity 1M under pages: exit $r, no reason"
"$THROTTLE_CTL" "$pctl" set capacity "" " +0768" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "throttle-ctl set capacity ' +0768' under pages"; }
grep -q "capacity 768" "$tmp/out" || { cat "$tmp/out"; fail "not 768 pages"; }
stop_nbdkit $pid
pid=$live_pid
expect_ctl 'error.*bad number \\"abc\\": expected a positive size' \
  'set capacity "" abc'
expect_ctl 'error.*unknown export \\"nosuch\\"' 'set capacity nosuch 1M'
expect_ctl 'error.*usage: set capacity EXPORT N, or set latency-target EXPORT DURATION|off, or set server-capacity N, or set rt on|off|auto (the default export is' \
  'set capacity ""'
expect_ctl '"ok":true,"export":"","latency_target":"5ms","previous_ns":null' \
  'set latency-target "" 5ms'
expect_ctl '"ok":true,"export":"","latency_target":"off","previous_ns":5000000' \
  'set latency-target "" off'
expect_ctl 'error.*latency.*at most 1 hour' 'set latency-target "" 3601'
expect_ctl '"ok":true,"export":"","latency_target":"5","previous_ns":null' \
  'set latency-target "" 5'
expect_ctl '"ok":true,"export":"","latency_target":"off","previous_ns":5000000000' \
  'set latency-target "" off'
expect_ctl '"stats \[EXPORT\]","metrics","set capacity EXPORT N","set latency-target EXPORT DURATION|off","set server-capacity N","set rt on|off|auto","help"' help
"$THROTTLE_CTL" "$ctl" set server-capacity 4M >"$tmp/out" ||
  { cat "$tmp/out"; fail "throttle-ctl set server-capacity 4M failed"; }
grep -q "^server-wide capacity 4194304 (4M), was 8388608 (8M)$" "$tmp/out" ||
  { cat "$tmp/out"; fail "throttle-ctl set server-capacity: unexpected output"; }
r=0; "$THROTTLE_CTL" "$ctl" set server-capacity 1M >"$tmp/out" 2>&1 || r=$?
[ $r = 1 ] && grep -q 'below the capacity 2097152 of export' "$tmp/out" ||
  { cat "$tmp/out"; fail "throttle-ctl set server-capacity 1M: exit $r"; }
stop_nbdkit $pid

# Without throttle-server-capacity the server's bound follows an export
# raised above it (one export behaves as if there were no server-wide
# bound), until set server-capacity fixes it.
rm -f "$ctl"
start_nbdkit follow --filter="$THROTTLE_FILTER" memory 16M \
  throttle-capacity=1M throttle-rt=off throttle-control="$ctl"
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
expect_ctl '"server":{"capacity":1048576,' stats
expect_ctl '"ok":true,"export":"","capacity":67108864,"previous":1048576' \
  'set capacity "" 64M'
expect_ctl '"server":{"capacity":67108864,' stats
expect_ctl '"ok":true,"export":"","capacity":1048576' 'set capacity "" 1M'
expect_ctl '"server":{"capacity":67108864,' stats
expect_ctl '"ok":true,"server_capacity":2097152' 'set server-capacity 2M'
expect_ctl 'error.*capacity \\"4M\\": above the server-wide capacity 2097152' \
  'set capacity "" 4M'
stop_nbdkit $pid
echo "test-server-capacity: PASS"
