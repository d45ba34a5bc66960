#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Which budget a connection is charged to: the one of the export name
# it opened, whatever other clients did before; "" exists from start
# to exit, every other budget only while a connection to its name is
# open.  Checked here:
#  - right after start, before any client, stats show the default
#    capacity and the default export's budget, kept until exit;
#  - a listed export "a": a connection opened before any NBD_OPT_LIST
#    and one opened after it share a's budget, and the backend never
#    has more than its capacity in flight (on a filter that charged
#    the first to "" until a listing, 2 x the capacity was);
#  - invented names e0..e3: a budget each while connected (stats show
#    them with their connections), gone once they close, and the
#    server-wide budget (throttle-capacity by default) bounds them
#    together at the backend;
#  - hundreds of connections with distinct 4000-byte names: the
#    budgets go with their connections, the server's memory does not
#    grow with them;
#  - nbdkit's file plugin with dir=: a budget per file while connected,
#    none for a name the plugin refuses, a file added later has one at
#    its first connection without any listing;
#  - 151 exports: one stats reply gives them all, in creation order,
#    unpaged.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

ctl=$tmp/ctl.sock

# --- one budget per name, whatever clients did before ---------------------
# The backend holds each write 300 ms: two connections keeping 16 writes
# of 64K each queued want 2M in flight at once.
start_nbdkit listed --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=300 statefile="$tmp/listed.state" throttle-capacity=1M \
  export=a export=b throttle-control="$ctl"
listed=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
# The backend's peak is checked even when a check here failed.
rc=0
$PY - "$tmp/listed.sock" "$ctl" <<'EOF' || rc=$?
import sys, threading, time
import nbd
import throttle_control as cc
sock, ctl = sys.argv[1], cc.Control(sys.argv[2])
failed = []

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

def check(cond, msg):
    """A failed check lets the load below run all the same."""
    if not cond:
        print("FAIL: " + msg, flush=True)
        failed.append(msg)
    return cond

def exports():
    return {e["name"]: e for e in ctl.ask("stats")["exports"]}

def gone(name):
    """Wait (30 s at most) for the budget of name to go with its last
    connection: nbdkit closes a handle after the client's shutdown."""
    for _ in range(300):
        if name not in exports():
            return True
        time.sleep(0.1)
    return False

r = ctl.ask("stats")
print("stats at start:", r)
e = r["exports"][0]
if check(r.get("default_capacity") == 1048576 and len(r["exports"]) == 1 and
         e["name"] == "" and e["capacity"] == 1048576 and
         e["admitted"] == 0 and e.get("connections") == 0 and
         e.get("kept") == "until exit",
         "stats at start do not show the default budget: %s" % r):
    print("ok: before any client, stats show the default budget, kept "
          "until exit")

def connect(name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    return h

def listing():
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_unix(sock)
    seen = []
    h.opt_list(lambda name, desc: seen.append(name) or 0)
    h.opt_abort()
    return sorted(seen)

# One connection to a before any client has listed the exports...
first = connect("a")
ex = exports()
check("a" in ex and ex["a"].get("connections") == 1 and
      ex["a"].get("kept") == "while connected",
      "a connection to a before any listing: %s" % ex)
# ... a listing, which gives no name a budget ...
if listing() != ["a", "b"]:
    fail("the listing passed through the filter changed")
check("b" not in exports(),
      "the listing made a budget for b, which no connection has open")
# ... and one after it: the same budget.
second = connect("a")
ex = exports()
if check("a" in ex and ex["a"].get("connections") == 2 and
         ex[""].get("connections") == 0,
         "a connection to a after a listing: %s" % ex):
    print("ok: a's connections opened before and after a listing share "
          "a's budget")

errors = []
def run(h):
    try:
        cc.pipeline(h, b"a", 16)
    except Exception as e:
        errors.append(str(e))
ts = [threading.Thread(target=run, args=(h,)) for h in (first, second)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    fail("writes failed: %s" % errors)
ex = exports()
if failed:
    fail("%d checks failed" % len(failed))
if ex["a"]["admitted"] != 32 or ex["a"]["peak"] > 1048576 or \
   ex[""]["admitted"] != 0:
    fail("the 32 writes to a were not all charged to a within 1M: %s" % ex)
print("ok: a's budget took all 32 writes, peak %d <= 1M" % ex["a"]["peak"])

# What a command set on a's budget lasts as long as the budget.
r = ctl.ask("set capacity a 512K")
if r.get("capacity") != 524288:
    fail("set capacity a 512K: %s" % r)
first.shutdown()
second.shutdown()
if not gone("a"):
    fail("a's budget outlived its connections: %s" % exports())
h = connect("a")
if exports()["a"]["capacity"] != 1048576:
    fail("a reopened: not at the configured capacity: %s" % exports())
h.shutdown()
print("ok: a's budget, and its capacity set to 512K, went with its last "
      "connection; reopened at 1M")
EOF
stop_nbdkit $listed
peak=$(statefield "$tmp/listed.state" peak_bytes)
writes=$(statefield "$tmp/listed.state" writes)
echo "backend: peak $peak bytes in flight over a's two connections, $writes writes"
[ "$writes" -eq 32 ] || fail "expected 32 writes at the backend, saw $writes"
[ "$peak" -le 1048576 ] ||
  fail "backend peak $peak exceeds a's capacity 1048576: the connection opened before the listing was charged to another budget"
[ "$peak" -ge 786432 ] || fail "backend peak $peak: the budget was not used"
[ $rc = 0 ] || fail "listed names (above)"
echo "ok: backend peak $peak <= a's capacity 1M"

# --- invented names: a budget each while connected ------------------------
# throttle-reserve=0: no pre-grown heap, so that what nbdkit keeps shows
# in its resident size.
start_nbdkit names --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=100 statefile="$tmp/names.state" throttle-capacity=256K \
  throttle-reserve=0 throttle-control="$ctl"
names=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"

$PY - "$tmp/names.sock" "$ctl" "$names" <<'EOF' || fail "invented names"
import json, os, sys, threading, time
import nbd
import throttle_control as cc
sock, ctl_path, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

ctl = cc.Control(ctl_path)

def exports():
    return {e["name"]: e for e in ctl.ask("stats")["exports"]}

def only_default():
    """Wait (30 s at most) until "" is the only budget left."""
    for _ in range(300):
        r = ctl.ask("stats")
        if r["exports_total"] == 1:
            return r
        time.sleep(0.1)
    fail("budgets outlived their connections: %s" % r)

# 4 connections, invented names e0..e3, 16 writes of 64K queued each.
hs = []
for i in range(4):
    h = nbd.NBD()
    h.set_export_name("e%d" % i)
    h.connect_unix(sock)
    hs.append(h)
errors = []
def writer(h):
    try:
        cc.pipeline(h, b"x", 16)
    except Exception as e:
        errors.append(str(e))
ts = [threading.Thread(target=writer, args=(h,)) for h in hs]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    fail("writes failed: %s" % errors)
ex = exports()
if sorted(ex) != ["", "e0", "e1", "e2", "e3"]:
    fail("e0..e3 connected: budgets %r" % sorted(ex))
for i in range(4):
    e = ex["e%d" % i]
    if e["admitted"] != 16 or e["peak"] > 262144 or e["connections"] != 1 \
       or e["kept"] != "while connected":
        fail("e%d: %s" % (i, e))
if ex[""]["admitted"] != 0:
    fail("the default budget was charged: %s" % ex[""])
for h in hs:
    h.shutdown()
only_default()
print("ok: e0..e3 had a budget each (16 writes within 256K) while "
      "connected, none after")

# Many connections with distinct long names: nothing is kept for them.
def rss_kb():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
def connect_many(first, n):
    for i in range(first, first + n):
        h = nbd.NBD()
        h.set_export_name(("%06d" % i) * 666 + "long")   # 4000 bytes
        h.connect_unix(sock)
        h.shutdown()
connect_many(0, 100)            # warm up nbdkit's own allocations
only_default()
rss0 = rss_kb()
connect_many(100, 600)
r = only_default()
rss1 = rss_kb()
line = json.dumps(r)
print("after 700 long names: exports_total %d, stats reply %d bytes, "
      "VmRSS %d -> %d kB" % (r["exports_total"], len(line), rss0, rss1))
if len(line) > 2000:
    fail("the stats reply grew to %d bytes" % len(line))
# 600 names of 4000 bytes kept would be more than 2.4 MB.  Under a
# sanitizer freed memory is held back (quarantine): only the budgets
# count is checked there.
if not os.environ.get("SANITIZERS") and rss1 - rss0 > 1200:
    fail("nbdkit grew by %d kB over 600 connections" % (rss1 - rss0))
print("ok: 700 distinct 4000-byte names: their budgets went with them, "
      "nbdkit grew %d kB" % (rss1 - rss0))
EOF
stop_nbdkit $names
writes=$(statefield "$tmp/names.state" writes)
[ "$writes" -eq 64 ] || fail "expected 64 writes at the backend, saw $writes"
peak=$(statefield "$tmp/names.state" peak_bytes)
[ "$peak" -le 262144 ] ||
  fail "backend peak $peak exceeds the server-wide capacity 262144: invented names multiplied the bound"
[ "$peak" -ge 196608 ] || fail "backend peak $peak: the budgets were not used"
echo "ok: backend peak $peak <= the server-wide capacity with 4 invented names"

# --- the file plugin with dir=: one budget per file -----------------------
mkdir "$tmp/dir"
truncate -s 1M "$tmp/dir/f1" "$tmp/dir/f2"
start_nbdkit dir --filter="$THROTTLE_FILTER" file dir="$tmp/dir" \
  throttle-capacity=256K throttle-control="$ctl"
dir=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
$PY - "$tmp/dir.sock" "$ctl" "$tmp/dir" <<'EOF' || fail "file dir="
import os, sys
import nbd
import throttle_control as cc
sock, ctl, d = sys.argv[1], cc.Control(sys.argv[2]), sys.argv[3]

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

def connect(name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    return h

def write(h, n):
    for i in range(n):
        h.pwrite(b"z" * 4096, i * 4096)

def exports():
    return {e["name"]: e for e in ctl.ask("stats")["exports"]}

h1, h2 = connect("f1"), connect("f2")
write(h1, 3)
write(h2, 5)
try:
    connect("nosuch")
    fail("the file plugin opened a name that is not a file")
except nbd.Error:
    pass
ex = exports()
if sorted(ex) != ["", "f1", "f2"] or ex["f1"]["admitted"] != 3 or \
   ex["f2"]["admitted"] != 5 or ex[""]["admitted"] != 0:
    fail("per-file budgets: %s" % ex)
print("ok: f1 and f2 each have their own budget (3 and 5 writes); none "
      "for a name the plugin refused")

# A file added later has its budget at its first connection.
with open(os.path.join(d, "f3"), "wb") as f:
    f.truncate(1 << 20)
h3 = connect("f3")
write(h3, 2)
ex = exports()
if ex.get("f3", {}).get("admitted") != 2 or ex[""]["admitted"] != 0:
    fail("f3, never listed: %s" % ex)
for h in (h1, h2, h3):
    h.shutdown()
print("ok: f3, added later and never listed, has its own budget")
EOF
stop_nbdkit $dir

# --- every export in one reply ---------------------------------------------
# One request thread per connection: 150 connections stay open.
start_nbdkit many --threads=1 --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=0 throttle-control="$ctl"
many=$pid
wait_for_socket "$ctl" "$pid" || fail "no control socket at $ctl"
hold_exports "$tmp/many.sock" many $(seq -f 'n%g' 0 149)
$PY - "$ctl" <<'EOF' || fail "stats of 151 budgets"
import sys
import throttle_control as cc
ctl = cc.Control(sys.argv[1])

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

r = ctl.ask("stats")
names = [e["name"] for e in r["exports"]]
print("stats: %d exports, exports_total %d" % (len(names), r["exports_total"]))
if r["exports_total"] != 151 or names != [""] + ["n%d" % i for i in range(150)]:
    fail("the reply is not \"\" and n0..n149 in the order they were made")
if "next" in r or "from" in r:
    fail("the reply is paged: %s" % sorted(r))
for bad in ("stats from 0", "stats a b"):
    r = ctl.ask(bad)
    if "usage: stats [EXPORT]" not in r.get("error", ""):
        fail("%r: %s" % (bad, r))
print("ok: one stats reply of 151 budgets")
EOF
kill $held; wait $held 2>/dev/null || :
stop_nbdkit $many

echo "PASS"
