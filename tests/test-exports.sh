#!/usr/bin/env bash
# Export names do not multiply the bound.  A name has a budget of its
# own only if the plugin listed it; every other name is charged to the
# default export's budget.  Checked here:
#  - right after start, before any client, stats show the default
#    capacity and the default export's budget;
#  - 4 connections using invented names e0..e3 over a plugin that lists
#    only the default export: the backend never has more than the
#    capacity in flight;
#  - hundreds of connections with distinct 4000-byte names: no budget,
#    stats stay one export, the server's memory does not grow with them;
#  - names the plugin lists get budgets of their own once it has listed
#    them (backend peak above one capacity, within two);
#  - nbdkit's file plugin with dir=: a budget per file, none for a name
#    that is not a file, a file added later gets one at the next listing;
#  - more exports than a page: stats are paged (from/next) and complete,
#    and at most 1024 budgets exist.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'

ctl=$tmp/ctl.sock

# --- invented names share the default budget ---------------------------
# throttle-reserve=0: no pre-grown heap, so that what nbdkit keeps shows
# in its resident size.
start_nbdkit names --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=100 statefile="$tmp/names.state" throttle-capacity=256K \
  throttle-reserve=0 throttle-control="$ctl"
names=$pid
for i in $(seq 50); do [ -S "$ctl" ] && break; sleep 0.1; done

$PY - "$tmp/names.sock" "$ctl" "$names" "$srcdir" <<'EOF' || fail "invented names"
import importlib, json, os, sys, threading
import nbd
sys.path.insert(0, sys.argv[4])
cc = importlib.import_module("control-client")
sock, ctl_path, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

ctl = cc.Control(ctl_path)

# Right after start: the configured capacity and the default budget.
r = ctl.ask("stats")
print("stats at start:", r)
if r.get("default_capacity") != 262144:
    fail("stats at start do not show the default capacity 262144: %s" % r)
ex = {e["name"]: e for e in r.get("exports", [])}
if "" not in ex or ex[""]["capacity"] != 262144 or ex[""]["admitted"] != 0:
    fail("stats at start do not show the default export's budget: %s" % r)
r = ctl.ask('stats ""')
if r.get("exports", [{}])[0].get("capacity") != 262144:
    fail('stats "" at start: %s' % r)
print("ok: stats before any client show the default capacity and budget")

def pipeline(h, byte, n):
    """n writes of 64K, all sent before waiting for any."""
    buf = nbd.Buffer.from_bytearray(bytearray(byte * 65536))
    left = [n]
    def done(err):
        left[0] -= 1
        return 0
    for i in range(n):
        h.aio_pwrite(buf, i * 65536, completion=done)
    while left[0] > 0:
        h.poll(-1)

# 4 connections, invented names e0..e3, 16 writes of 64K queued each.
errors = []
def writer(name):
    try:
        h = nbd.NBD()
        h.set_export_name(name)
        h.connect_unix(sock)
        pipeline(h, b"x", 16)
        h.shutdown()
    except Exception as e:
        errors.append("%s: %s" % (name, e))
ts = [threading.Thread(target=writer, args=("e%d" % i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    fail("writes failed: %s" % errors)
r = ctl.ask("stats")
names = [e["name"] for e in r["exports"]]
if names != [""] or r["exports_total"] != 1:
    fail("invented names got budgets of their own: %r" % names[:10])
e = r["exports"][0]
if e["admitted"] != 64 or e["peak"] > 262144:
    fail("the default budget did not take the 64 writes within 256K: %s" % e)
print("ok: e0..e3 charged to the default budget: admitted %d, peak %d"
      % (e["admitted"], e["peak"]))

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
rss0 = rss_kb()
connect_many(100, 600)
rss1 = rss_kb()
r = ctl.ask("stats")
line = json.dumps(r)
print("after 700 long names: exports_total %d, stats reply %d bytes, "
      "VmRSS %d -> %d kB" % (r["exports_total"], len(line), rss0, rss1))
if r["exports_total"] != 1 or [e["name"] for e in r["exports"]] != [""]:
    fail("long invented names made budgets: %d exports" % r["exports_total"])
if len(line) > 2000:
    fail("the stats reply grew to %d bytes" % len(line))
# 600 names of 4000 bytes kept would be more than 2.4 MB.  Under a
# sanitizer freed memory is held back (quarantine): only the budgets
# count is checked there.
if not os.environ.get("SANITIZERS") and rss1 - rss0 > 1200:
    fail("nbdkit grew by %d kB over 600 connections" % (rss1 - rss0))
print("ok: 700 distinct 4000-byte names: one budget, nbdkit grew %d kB"
      % (rss1 - rss0))
EOF
stop_nbdkit $names
peak=$(statefield "$tmp/names.state" peak_bytes)
writes=$(statefield "$tmp/names.state" writes)
echo "backend: peak $peak bytes in flight, $writes writes (capacity 262144)"
[ "$writes" -eq 64 ] || fail "expected 64 writes at the backend, saw $writes"
[ "$peak" -le 262144 ] ||
  fail "backend peak $peak exceeds the capacity 262144: invented names multiplied the bound"
[ "$peak" -ge 196608 ] || fail "backend peak $peak: the budget was not used"
echo "ok: backend peak $peak <= capacity with 4 invented names"

# --- names the plugin lists have budgets of their own ---------------------
start_nbdkit listed --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=100 statefile="$tmp/listed.state" throttle-capacity=256K \
  throttle-server-capacity=512K export=a export=b throttle-control="$ctl"
listed=$pid
for i in $(seq 50); do [ -S "$ctl" ] && break; sleep 0.1; done
$PY - "$tmp/listed.sock" "$ctl" "$srcdir" <<'EOF' || fail "listed names"
import importlib, os, sys, threading
import nbd
sys.path.insert(0, sys.argv[-1])
cc = importlib.import_module("control-client")
sock, ctl = sys.argv[1], cc.Control(sys.argv[2])

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

def write(name, n=1):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    buf = nbd.Buffer.from_bytearray(bytearray(b"y" * 65536))
    left = [n]
    def done(err):
        left[0] -= 1
        return 0
    for i in range(n):
        h.aio_pwrite(buf, i * 65536, completion=done)
    while left[0] > 0:
        h.poll(-1)
    h.shutdown()

def exports():
    r = ctl.ask("stats")
    return {e["name"]: e for e in r["exports"]}

# Before the plugin has listed them, a and b share the default budget.
write("a")
ex = exports()
if list(ex) != [""] or ex[""]["admitted"] != 1:
    fail("a name opened before any listing: %s" % ex)
r = ctl.ask("stats a")
if "unknown export" not in r.get("error", ""):
    fail("stats of a name not listed yet: %s" % r)
print("ok: before any listing, a is charged to the default budget")

# A client lists the exports: a and b get budgets at once.
h = nbd.NBD()
h.set_opt_mode(True)
h.connect_unix(sock)
seen = []
h.opt_list(lambda name, desc: seen.append(name) or 0)
h.opt_abort()
if sorted(seen) != ["a", "b"]:
    fail("the listing passed through the filter changed: %r" % seen)
ex = exports()
if sorted(ex) != ["", "a", "b"] or ex["a"]["capacity"] != 262144:
    fail("listed names have no budgets: %s" % ex)
print("ok: the listing gave a and b budgets at 256K, before any write")

# 2 connections to a and 2 to b, 8 writes of 64K queued each: 1M wanted.
ts = [threading.Thread(target=write, args=(n, 8)) for n in "aabb"]
for t in ts: t.start()
for t in ts: t.join()
write("c")                      # not listed
ex = exports()
for n in "ab":
    if ex[n]["admitted"] != 16 or ex[n]["peak"] > 262144:
        fail("export %s: %s" % (n, ex[n]))
if ex[""]["admitted"] != 2 or "c" in ex:
    fail("an unlisted name was not charged to the default budget: %s" % ex)
print("ok: a and b each took 16 writes within 256K; c went to the default")
EOF
stop_nbdkit $listed
peak=$(statefield "$tmp/listed.state" peak_bytes)
echo "backend: peak $peak bytes in flight over a and b"
[ "$peak" -gt 262144 ] ||
  fail "backend peak $peak: listed exports a and b did not get a budget each"
[ "$peak" -le 524288 ] || fail "backend peak $peak exceeds two budgets"
echo "ok: listed exports a and b: backend peak $peak, within 2 x 256K"

# --- the file plugin with dir=: one budget per file -----------------------
mkdir "$tmp/dir"
truncate -s 1M "$tmp/dir/f1" "$tmp/dir/f2"
start_nbdkit dir --filter="$THROTTLE_FILTER" file dir="$tmp/dir" \
  throttle-capacity=256K throttle-control="$ctl"
dir=$pid
for i in $(seq 50); do [ -S "$ctl" ] && break; sleep 0.1; done
$PY - "$tmp/dir.sock" "$ctl" "$tmp/dir" "$srcdir" <<'EOF' || fail "file dir="
import importlib, os, sys
import nbd
sys.path.insert(0, sys.argv[-1])
cc = importlib.import_module("control-client")
sock, ctl, d = sys.argv[1], cc.Control(sys.argv[2]), sys.argv[3]

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

def listing():
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_unix(sock)
    seen = []
    h.opt_list(lambda name, desc: seen.append(name) or 0)
    h.opt_abort()
    return sorted(seen)

def write(name, n):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    for i in range(n):
        h.pwrite(b"z" * 4096, i * 4096)
    h.shutdown()

def exports():
    return {e["name"]: e for e in ctl.ask("stats")["exports"]}

if listing() != ["f1", "f2"]:
    fail("the file plugin's list through the filter")
write("f1", 3)
write("f2", 5)
try:
    write("nosuch", 1)
    fail("the file plugin opened a name that is not a file")
except nbd.Error:
    pass
ex = exports()
if sorted(ex) != ["", "f1", "f2"] or ex["f1"]["admitted"] != 3 or \
   ex["f2"]["admitted"] != 5 or ex[""]["admitted"] != 0:
    fail("per-file budgets: %s" % ex)
print("ok: f1 and f2 each have their own budget (3 and 5 writes)")

# A file added later gets its budget at the next listing.
with open(os.path.join(d, "f3"), "wb") as f:
    f.truncate(1 << 20)
write("f3", 2)
ex = exports()
if "f3" in ex or ex[""]["admitted"] != 2:
    fail("f3 before a listing: %s" % ex)
if listing() != ["f1", "f2", "f3"]:
    fail("the list after adding f3")
write("f3", 4)
ex = exports()
if ex.get("f3", {}).get("admitted") != 4:
    fail("f3 after the listing: %s" % ex)
print("ok: f3, added later, charged to the default until listed, then its own")
EOF
stop_nbdkit $dir

# --- paged stats, and the bound on the number of budgets ------------------
args=()
for i in $(seq 0 1099); do args+=("export=n$i"); done
start_nbdkit many --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" delay-ms=0 \
  "${args[@]}" throttle-control="$ctl" throttle-stats-interval=0.3
many=$pid
for i in $(seq 50); do [ -S "$ctl" ] && break; sleep 0.1; done
$PY - "$tmp/many.sock" "$ctl" "$srcdir" <<'EOF' || fail "paged stats"
import importlib, os, sys
import nbd
sys.path.insert(0, sys.argv[-1])
cc = importlib.import_module("control-client")
sock, ctl = sys.argv[1], cc.Control(sys.argv[2])

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

h = nbd.NBD()
h.set_opt_mode(True)
h.connect_unix(sock)
seen = []
h.opt_list(lambda name, desc: seen.append(name) or 0)
h.opt_abort()
if len(seen) != 1100:
    fail("the listing has %d names, not 1100" % len(seen))

names, frm, pages = [], 0, 0
while frm is not None:
    r = ctl.ask("stats from %d" % frm)
    if r.get("from") != frm or len(r["exports"]) > 100:
        fail("page from %d: from %s, %d exports" %
             (frm, r.get("from"), len(r["exports"])))
    names += [e["name"] for e in r["exports"]]
    frm = r["next"]
    pages += 1
total = r["exports_total"]
print("stats: %d pages, %d exports, exports_total %d" %
      (pages, len(names), total))
if total != 1024 or len(names) != 1024 or len(set(names)) != 1024:
    fail("expected 1024 distinct budgets over the pages")
if names[0] != "" or names[1:] != ["n%d" % i for i in range(1023)]:
    fail("the pages are not the exports in creation order")
r = ctl.ask("stats")
if len(r["exports"]) != 100 or r["next"] != 100:
    fail("plain stats is not the first page: next %s" % r.get("next"))
for bad in ("stats from x", "stats from -1", "stats from 1 2"):
    r = ctl.ask(bad)
    if "error" not in r:
        fail("%r: %s" % (bad, r))
if ctl.ask("stats from 5000")["exports"] != []:
    fail("a page past the end is not empty")

# A listed name beyond the 1024 budgets is charged to the default.
h = nbd.NBD()
h.set_export_name("n1099")
h.connect_unix(sock)
h.pwrite(b"q" * 4096, 0)
h.shutdown()
if ctl.ask('stats ""')["exports"][0]["admitted"] != 1 or \
   "unknown export" not in ctl.ask("stats n1099").get("error", ""):
    fail("n1099, beyond the bound, was not charged to the default budget")
print("ok: paged stats; 1024 budgets at most; n1099 charged to the default")
EOF
sleep 0.4
stop_nbdkit $many
# The periodic stats log every page, each line valid JSON.
debug_json 'throttle: stats ' "$tmp/many.log" | tail -11 |
  $PY -c 'import json, sys
pages = [json.loads(l) for l in sys.stdin]
froms = [p["from"] for p in pages]
assert 0 in froms and 1000 in froms, froms' ||
  fail "the periodic stats do not log every page"
echo "ok: the periodic stats log every page"

echo "PASS"
