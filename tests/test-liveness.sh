#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# No capacity strands a request, whoever sets it, against real nbdkit
# (the clients are tests/liveness.py):
# 1. a latency target far below the backend's latency steps the
#    capacity down to its floor, and the writes of 1M queued before
#    keep being admitted (default floor, and a 4K floor); set capacity
#    with a target moves the ceiling and the capacity at once; a
#    window ends on time, with a write still held and none completing;
# 2. lowering the capacity below a queued write's part: it and a later
#    write complete once the write in flight does;
# 3. a capacity or floor that cannot admit one page (bytes metric) is
#    refused at start, by set capacity, and by the swap helper; the
#    smallest ones are taken and serve requests larger than themselves;
#    a user metric charging more than the capacity is clamped, counted.
# Each wait is for a state read from the control socket, failing after
# LIVENESS_LIMIT seconds with the last stats and the server's log.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires_file "$TEST_METRIC"
requires $PY -c 'import nbd'
requires "$NBDKIT" --dump-plugin memory
"$NBDKIT" -U - --filter=delay memory 1M --run true >/dev/null 2>&1 ||
  fail "nbdkit's delay filter is missing (package nbdkit)"

client=$srcdir/liveness.py
ctl=$tmp/ctl.sock

wait_ctl ()
{
  wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
}

# run_client ARGS...: liveness.py, turned into a failure if it hangs.
run_client ()
{
  timeout 600 $PY "$client" "$@" || fail "liveness.py $1 failed (above)"
}

# --- 1. the latency target ----------------------------------------------
for floor in "" throttle-min-capacity=4K; do
  rm -f "$ctl"
  start_nbdkit target --filter="$THROTTLE_FILTER" --filter=delay \
    memory 16M delay-write=200ms throttle-capacity=1M \
    throttle-latency-target=1ms throttle-rt=off $floor \
    throttle-control="$ctl" -D throttle.adapt=1
  wait_ctl
  if [ -z "$floor" ]; then
    run_client target "$tmp/target.sock" "$ctl" set-capacity
  else
    run_client target "$tmp/target.sock" "$ctl"
  fi
  stop_nbdkit $pid 30
  echo "ok: latency target${floor:+ with $floor}: writes kept flowing"
done

# A window ends on time: judged while a write is still held in flight,
# with no completion to end it.
rm -f "$ctl" "$tmp/gate"
start_nbdkit window --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" delay-ms=0 \
  gate="$tmp/gate" throttle-capacity=1M throttle-latency-target=1s \
  throttle-rt=off throttle-control="$ctl" -D throttle.adapt=1
wait_ctl
run_client window "$tmp/window.sock" "$ctl" "$tmp/gate"
stop_nbdkit $pid 30
echo "ok: a window ended on time"

# --- 2. lowering the capacity under a queued write -----------------------
rm -f "$ctl"
touch "$tmp/gate"
start_nbdkit lower --threads=16 --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=0 gate="$tmp/gate" throttle-capacity=1M throttle-rt=off \
  throttle-control="$ctl" -D throttle.verbose=1
wait_ctl
run_client lower "$tmp/lower.sock" "$ctl" "$tmp/gate"
stop_nbdkit $pid 30
echo "ok: lowering the capacity stranded nothing"

# --- 3. the smallest capacities -----------------------------------------
good ()
{
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M "$@" --run true \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "refused: $*"; }
  echo "ok: accepted $*"
}
start_refused "throttle-capacity=1000: below 4096" throttle-capacity=1000
start_refused "throttle-capacity=4095: below 4096" throttle-capacity=4095
start_refused "throttle-min-capacity=1000: below 4096" \
    throttle-capacity=1M throttle-min-capacity=1000
start_refused "throttle-min-capacity=2K: below 4096" \
    throttle-capacity=64K throttle-min-capacity=2K throttle-latency-target=5ms
good throttle-capacity=4096
good throttle-capacity=4K throttle-min-capacity=4K throttle-latency-target=5ms
good throttle-metric=pages throttle-capacity=1
good throttle-metric=pages throttle-capacity=16 throttle-min-capacity=1
good throttle-metric=requests throttle-capacity=1
good throttle-metric="$TEST_METRIC" throttle-capacity=1
# A default floor below a page is raised to a page, not refused.
good throttle-capacity=32K throttle-latency-target=5ms

# At the smallest capacity, requests larger than it are served (in
# parts), reads charged too; set capacity refuses less than a page,
# naming the value.
rm -f "$ctl"
start_nbdkit small --filter="$THROTTLE_FILTER" memory 16M \
  throttle-capacity=4K throttle-reads=true throttle-rt=off \
  throttle-control="$ctl"
wait_ctl
timeout 60 $PY - "$tmp/small.sock" <<'EOF' || fail "16K requests at capacity 4K"
import nbd, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
h.pwrite(b"x" * 16384, 0)
assert h.pread(16384, 0) == b"x" * 16384
h.pwrite(b"y" * 1000, 5)
h.shutdown()
print("ok: a 16K write and a 16K read at capacity 4K")
EOF
expect_ctl ()
{
  local pattern=$1 r; shift
  r=$(ctl_send "$ctl" "$@")
  echo "$* -> $r"
  echo "$r" | grep -q -- "$pattern" || fail "$*: expected '$pattern'"
}
expect_ctl 'error.*capacity \\"100\\".*4096' 'set capacity "" 100'
expect_ctl 'error.*capacity \\"4095\\".*4096' 'set capacity "" 4095'
expect_ctl '"ok":true.*"capacity":8192' 'set capacity "" 8K'
expect_ctl '"capacity":8192' 'stats ""'
stop_nbdkit $pid

# A user metric that charges more than the capacity for one request
# (2 units a 64K write, under a capacity of 1): charged in full, run
# alone, and counted as clamped.
rm -f "$ctl"
start_nbdkit clamp --filter="$THROTTLE_FILTER" memory 16M \
  throttle-metric="$TEST_METRIC" throttle-capacity=1 throttle-rt=off \
  throttle-control="$ctl"
wait_ctl
timeout 60 $PY - "$tmp/clamp.sock" <<'EOF' || fail "writes under a user metric"
import nbd, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
for i in range(4):
    h.pwrite(b"z" * 65536, i * 65536)
h.shutdown()
EOF
expect_ctl '"capacity":1,.*"peak":2,.*"charged":8,.*"clamped":4' 'stats ""'
stop_nbdkit $pid

# The swap helper refuses a capacity below a page under the bytes
# metric (its default), before nbdkit is started.
if [ -n "${THROTTLE_SWAP_HELPER:-}" ] && [ -x "$THROTTLE_SWAP_HELPER" ]; then
  export NBDKIT_THROTTLE_CONFDIR=$tmp/conf
  mkdir -p "$tmp/conf"
  helper ()
  {
    local rc=$1 pattern=$2 r=0; shift 2
    printf '%s\n' "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "$@" >"$tmp/conf/t.conf"
    "$THROTTLE_SWAP_HELPER" print t >"$tmp/out" 2>&1 || r=$?
    [ "$r" = "$rc" ] && grep -q -- "$pattern" "$tmp/out" ||
      { cat "$tmp/out"; fail "helper with $*: exit $r, expected $rc and '$pattern'"; }
    echo "ok: helper with $*: $(head -1 "$tmp/out")"
  }
  helper 1 "CAPACITY=2K: below 4096 bytes" "CAPACITY=2K"
  helper 1 "CAPACITY=4095: below 4096 bytes" "CAPACITY=4095"
  helper 1 "CAPACITY=0: below 4096 bytes" "CAPACITY=0"
  helper 0 "throttle-capacity=4K" "CAPACITY=4K"
  helper 0 "throttle-capacity=1M" "CAPACITY=1M"
  helper 0 "throttle-capacity=2 throttle-metric=requests" "CAPACITY=2" \
    "NBDKIT_ARGS=throttle-metric=requests"
  helper 1 "CAPACITY=0: expected at least 1" "CAPACITY=0" \
    "NBDKIT_ARGS=throttle-metric=pages"
else
  fail "THROTTLE_SWAP_HELPER is not built: the swap helper's check cannot run"
fi
echo "test-liveness: PASS"
