#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Hostile and unlucky clients against one server (capacity 256K, a
# backend that holds each request 300 ms and records its peak):
#  1. a connection dropped in the middle of a write's payload;
#  2. connections dropped while their write waits for credit (their
#     writes are still served: a client's state never ends a wait);
#  3. a write larger than the whole capacity (served in parts of at
#     most the capacity);
#  4. a client that floods writes without reading the replies.
# Meanwhile another client's writes complete, and afterwards the budget
# is whole: a capacity-sized write is admitted and the unload summary
# says in_flight=0.
# (Clients vanishing with many requests queued: test-client-done.sh.)
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

cap=262144
hc="$PY $srcdir/hostile-client.py"
start_nbdkit hostile --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=300 gate="$tmp/gate" statefile="$tmp/hostile.state" \
  throttle-capacity=$cap \
  throttle-control="$tmp/hostile.ctl"
srv=$pid
sock=$tmp/hostile.sock

# other_client WHAT: 8 writes of 64K, depth 2, must complete in 20 s.
other_client ()
{
  $PY "$srcdir/client.py" "$uri" --conns 1 --depth 2 --size 65536 --count 8 \
    --timeout 20 >"$tmp/other.out" || fail "$1: another client's writes did not complete"
}

# wait_stat FIELD VALUE SECS: until the control socket shows it.
wait_stat ()
{
  local i v
  for i in $(seq $(($3 * 10))); do
    v=$($PY - "$tmp/hostile.ctl" "$1" <<'EOF'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"stats\n")
print(json.loads(s.makefile("rb").readline())["exports"][0][sys.argv[2]])
EOF
)
    [ "$v" = "$2" ] && return 0
    sleep 0.1
  done
  echo "$1 is $v, expected $2"
  return 1
}

# 1. Dropped mid-payload: nbdkit reads a short payload, drops the
# connection, and never passes the write down.
$hc partial "$sock" 65536 10000
$hc partial "$sock" 65536 0
other_client "partial requests"
echo "1. two connections dropped mid-request; another client's writes completed"

# 2. Dropped while waiting for credit: a 256K write holds the whole
# capacity (the backend holds it while $tmp/gate exists); three raw
# clients each send one 64K write, which must wait, and close at once.
# The control socket shows the three waiting before the holder's write
# is let go.
touch "$tmp/gate"
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size $cap --count 3 \
  --timeout 20 >/dev/null &
holder=$!
wait_stat in_flight $cap 10 || fail "the holder's write did not take the whole capacity"
# Each closes once its write waits: one closed sooner could have its
# write failed by nbdkit itself (ESHUTDOWN) before the filter sees it.
for i in 1 2 3; do
  $hc vanish "$sock" 65536 "$tmp/hostile.ctl" $i >/dev/null ||
    fail "dropped client $i: its write did not wait for credit"
done
wait_stat waiters 3 10 || fail "the dropped clients' writes did not keep waiting once their clients closed"
rm "$tmp/gate"
other_client "clients dropped while waiting"
wait $holder || fail "the holder's writes failed"
wait_stat in_flight 0 10 || fail "credit did not come back after the dropped waiters"
echo "2. three connections dropped while waiting for credit; another client's writes completed"

# 3. Larger than the capacity: served in parts, each charged on its
# own, so the backend never has more than the capacity in flight
# (checked below by the backend's peak: exactly the capacity).
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size 1048576 --count 2 \
  --timeout 20 >/dev/null &
big=$!
$PY "$srcdir/client.py" "$uri" --conns 2 --depth 4 --size 65536 --count 16 \
  --timeout 30 >/dev/null || fail "writes beside the oversized one did not complete"
wait $big || fail "a write larger than the capacity did not complete"
echo "3. two 1M writes (capacity 256K) completed in parts, with 64K writes beside them"

# 4. A flood without reading replies: 600 requests, writes of 16K and
# reads of 64K, and no reply read for 3 s: the read replies (19M) fill
# the socket buffers and nbdkit's threads for that client block in
# send.  Meanwhile another client is served.  Then the flooder reads
# its replies and leaves.
$hc flood "$sock" 600 16384 3 >"$tmp/flood.out" &
flood=$!
sleep 1
other_client "a flooding client"
wait $flood || { cat "$tmp/flood.out"; fail "the flooding client's writes failed"; }
cat "$tmp/flood.out"
echo "4. a client flooded without reading replies; another client's writes completed"

# The budget is whole.
wait_stat in_flight 0 10 || fail "units left in flight"
$PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size $cap --count 1 \
  --timeout 10 >/dev/null || fail "a capacity-sized write was not admitted at the end"
stop_nbdkit $srv
peak=$(statefield "$tmp/hostile.state" peak_bytes)
cancelled=$(summary "$tmp/hostile.log" cancelled)
clamped=$(summary "$tmp/hostile.log" clamped)
echo "summary: in_flight=$(summary "$tmp/hostile.log" in_flight) cancelled=$cancelled clamped=$clamped backend peak=$peak"
[ "$(summary "$tmp/hostile.log" in_flight)" = 0 ] || fail "units left in flight at unload"
[ "$cancelled" = 0 ] || fail "$cancelled waits were cancelled: a client going must not end a wait"
[ "$clamped" = 0 ] || fail "$clamped oversized writes were clamped instead of served in parts"
[ "$peak" -eq $cap ] ||
  fail "backend peak $peak: expected exactly the capacity ($cap), the 1M writes in parts"
