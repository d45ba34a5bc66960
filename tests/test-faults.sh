#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fault injection under load: nbdkit's error filter below the throttle
# fails 10% of writes, zeroes and trims from four connections (with a
# delay below it, so that requests overlap and wait for credit).
# Afterwards, with nothing in flight, the budget has exactly its
# capacity: the control socket says in_flight 0, a request of the
# whole capacity is admitted at once, and the unload summary says
# in_flight=0.  In writeback mode, every background write that failed
# is reported at a flush, on every connection, and none is left
# unreported at exit.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires $PY -c 'import nbd'
"$NBDKIT" --filter=error --filter=delay null --dump-plugin >/dev/null 2>&1 ||
  { echo "$0: SKIP: nbdkit has no error or delay filter"; exit 77; }

cap=262144
errs="error-pwrite=EIO error-pwrite-rate=10% error-zero=EIO error-zero-rate=10%
      error-trim=EIO error-trim-rate=10%"

# stats_field SOCK FIELD: a field of the only export in 'stats'.
stats_field ()
{
  $PY - "$1" "$2" <<'EOF'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"stats\n")
f = s.makefile("rb")
print(json.loads(f.readline())["exports"][0][sys.argv[2]])
EOF
}

# full_capacity_admitted NAME: with errors off, one write of the whole
# capacity completes within 10 s (a single leaked unit would block it
# forever), and 'stats' then shows in_flight 0.
full_capacity_admitted ()
{
  local name=$1 t0 t1
  [ "$(stats_field "$tmp/$name.ctl" in_flight)" = 0 ] ||
    fail "$name: in_flight $(stats_field "$tmp/$name.ctl" in_flight) with nothing in flight"
  [ "$(stats_field "$tmp/$name.ctl" capacity)" = $cap ] ||
    fail "$name: capacity changed"
  t0=$(date +%s.%N)
  $PY "$srcdir/client.py" "$uri" --conns 1 --depth 1 --size $cap --count 1 \
    --timeout 10 >/dev/null || fail "$name: a capacity-sized write was not admitted"
  t1=$(date +%s.%N)
  echo "$name: capacity-sized write done in $(echo "$t1 - $t0" | bc) s; in_flight 0"
}

# --- writethrough ----------------------------------------------------
touch "$tmp/wt.on"
start_nbdkit wt --filter="$THROTTLE_FILTER" --filter=error --filter=delay \
  memory 64M delay-write=5ms delay-zero=5ms delay-trim=5ms \
  $errs error-file="$tmp/wt.on" \
  throttle-capacity=$cap throttle-control="$tmp/wt.ctl"
wtpid=$pid
$PY "$srcdir/client.py" "$uri" --conns 4 --depth 16 --size 65536 --count 200 \
  --op write,zero,write,trim --timeout 30 >"$tmp/wt.out" ||
  { cat "$tmp/wt.out"; fail "writethrough: the load did not complete in 30 s (leaked credit?)"; }
cat "$tmp/wt.out"
failed=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' "$tmp/wt.out")
ok=$(sed -n 's/.* ok=\([0-9]*\).*/\1/p' "$tmp/wt.out")
[ "$failed" -gt 0 ] || fail "writethrough: the error filter injected no errors"
[ "$ok" -gt "$failed" ] || fail "writethrough: more failed ($failed) than succeeded ($ok)"
rm "$tmp/wt.on"
full_capacity_admitted wt
stop_nbdkit $wtpid
[ "$(summary "$tmp/wt.log" in_flight)" = 0 ] || fail "writethrough: units left in flight"
waited=$(summary "$tmp/wt.log" waited)
[ "$waited" -gt 0 ] || fail "writethrough: nothing waited for credit: no load"
echo "writethrough: $failed of $((ok + failed)) requests failed, $waited waited; in_flight=0 at unload"

# --- writeback -------------------------------------------------------
requires_writeback

touch "$tmp/wb.on"
start_nbdkit wb --filter="$THROTTLE_FILTER" --filter=error --filter=delay \
  memory 64M delay-write=5ms delay-zero=5ms delay-trim=5ms \
  $errs error-file="$tmp/wb.on" \
  throttle-mode=writeback throttle-capacity=$cap throttle-control="$tmp/wb.ctl"
wbpid=$pid
# Four connections load, flush (flush 1), wait for each other; errors
# are switched off; each flushes twice more (flush 2 and 3).
timeout 60 $PY "$srcdir/hostile-client.py" flushload "$uri" 4 150 65536 \
  "$tmp/wb.on" >"$tmp/wb.out" ||
  { cat "$tmp/wb.out"; fail "writeback: the load did not complete in 60 s"; }
cat "$tmp/wb.out"
full_capacity_admitted wb
stop_nbdkit $wbpid
[ "$(summary "$tmp/wb.log" in_flight)" = 0 ] || fail "writeback: units left in flight"

bgfail=$(grep -c 'background write of .* failed' "$tmp/wb.log" || :)
[ "$bgfail" -gt 0 ] || fail "writeback: no background write failed: no fault injected"
# Each connection was open while writes failed behind its back, so each
# must have been told at a flush; after that, flushes succeed.
$PY - "$tmp/wb.out" <<'EOF' || fail "writeback: a connection was not told of the failures at a flush"
import json, sys
EIO = 5
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    told = EIO in (r["flush1"], r["flush2"])
    if not told or r["flush3"] != 0:
        print("connection %d: flushes %s %s %s" % (r["conn"], r["flush1"], r["flush2"], r["flush3"]))
        bad += 1
sys.exit(bad)
EOF
grep -q 'no flush reported it' "$tmp/wb.log" &&
  fail "writeback: failures left unreported at exit"
reported=$(grep -c 'writeback: flush of export' "$tmp/wb.log" || :)
echo "writeback: $bgfail background writes failed; $reported flush(es) reported them; every connection told; none unreported at exit; in_flight=0 at unload"
