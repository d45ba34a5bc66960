#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-mode=writeback serves the default export "" only.  Its
# write-behind queue orders the requests of connections to "" alone;
# the file plugin with file= serves every export name from the one
# file, so a write through another name would reach the file past the
# writes acknowledged on "" and still pending, and be overwritten by
# them after its own acknowledgement.  So:
#
# - writeback: a client asking for "x" is refused, with an error naming
#   the export and throttle-mode, and the export list shows "" alone;
#   a client of "" is served as before.
# - The scenario that lost a write: A on "" writes 4K at 1M (the one
#   writer is busy with it for the delay) and AAAA at 0, both
#   acknowledged at once, AAAA pending behind the first; B on "x" then
#   writes BBBB at 0.  The last acknowledged write at 0 is B's, so
#   after a flush from each the file must hold BBBB; the delay filter
#   makes the writer slow enough for a filter that serves "x" (as this
#   one did, writethrough, before it refused named exports) to put AAAA
#   on the file after B's BBBB.  Now B cannot connect, and A's data is
#   all there.  Nothing is timed: the delays only open the window.
# - writethrough: named exports are served, and the same scenario ends
#   with BBBB.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'
requires "$NBDKIT" --filter=delay null --dump-plugin
requires "$NBDKIT" file --dump-plugin
requires_writeback

img=$tmp/disk.img

# scenario SOCK MODE: the A/B writes above on a fresh $img.  In
# writeback B must be refused ("refused"); in writethrough it must be
# served ("served").  Either way nothing acknowledged may be lost.
scenario ()
{
  $PY - "$1" "$2" "$img" <<'EOF'
import sys
import nbd

sock, expect, img = sys.argv[1:]
K = 1024

def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)

def on_file(off, n):
    with open(img, "rb") as f:
        f.seek(off)
        return f.read(n)

def connect(name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sock)
    return h

# Both connect before any write: B's write follows A's by no more than
# the few calls between them, whatever the machine's speed.
a = connect("")
try:
    b = connect("x")
except nbd.Error as e:
    b = None
    refusal = str(e)
if expect == "refused" and b is not None:
    # The old behaviour: show what it costs before failing.
    a.pwrite(b"1" * (4 * K), 1024 * K)
    a.pwrite(b"AAAA", 0)
    b.pwrite(b"BBBB", 0)
    a.flush()
    b.flush()
    got = on_file(0, 4)
    if got != b"BBBB":
        fail("export \"x\" was served in writeback mode, and B's "
             "acknowledged write was lost: the file holds %r at 0, B "
             "wrote b'BBBB' after A's b'AAAA' was acknowledged" % got)
    fail("export \"x\" was served in writeback mode (its write was not "
         "lost this time: the file holds %r)" % got)
if expect == "served" and b is None:
    fail("export \"x\" refused in writethrough mode: %s" % refusal)
if b is None:
    print("B refused: %s" % refusal)

a.pwrite(b"1" * (4 * K), 1024 * K)
a.pwrite(b"AAAA", 0)
if b is not None:
    b.pwrite(b"BBBB", 0)
    b.flush()
a.flush()
want = b"AAAA" if b is None else b"BBBB"
if on_file(0, 4) != want:
    fail("the file holds %r at 0, not the last acknowledged write %r" %
         (on_file(0, 4), want))
if on_file(1024 * K, 4 * K) != b"1" * (4 * K):
    fail("A's write at 1M is not on the file after A's flush")
for h in (a, b):
    if h is not None and h.pread(4, 0) != want:
        fail("a client reads %r at 0, not %r" % (h.pread(4, 0), want))
    if h is not None:
        h.shutdown()
print("ok: %s: the file holds %r at 0" % (expect, want))
EOF
}

# --- writeback: "x" refused, "" served, nothing acknowledged lost ------
rm -f "$img"; truncate -s 4M "$img"
start_nbdkit wb --filter="$THROTTLE_FILTER" --filter=delay file "$img" \
  delay-write=1500ms throttle-mode=writeback throttle-writeback-threads=1 \
  throttle-capacity=1M
scenario "$tmp/wb.sock" refused || fail "writeback: the scenario failed"
stop_nbdkit "$pid" 10
# (Into a variable first: under pipefail, grep -q could fail the
# pipeline with the first grep's SIGPIPE.)
refusal=$(grep 'error:' "$tmp/wb.log" | grep -F 'export "x"' || :)
grep -q 'throttle-mode=writeback' <<<"$refusal" ||
  fail "writeback: the refusal of \"x\" does not name the export and throttle-mode"
echo "ok: refused in the log: $refusal"

# --- writethrough: "x" served, the last acknowledged write kept --------
rm -f "$img"; truncate -s 4M "$img"
start_nbdkit wt --filter="$THROTTLE_FILTER" --filter=delay file "$img" \
  delay-write=200ms throttle-mode=writethrough throttle-capacity=1M
scenario "$tmp/wt.sock" served || fail "writethrough: the scenario failed"
stop_nbdkit "$pid" 10

# --- the export list: writeback shows only what it serves --------------
# The test plugin lists "" and "a" and serves any name.
lists ()
{
  $PY - "$1" <<'EOF'
import sys
import nbd
h = nbd.NBD()
h.set_opt_mode(True)
h.connect_unix(sys.argv[1])
names = []
h.opt_list(lambda name, desc: names.append(name) or 0)
h.opt_abort()
print(" ".join(repr(n) for n in sorted(names)))
EOF
}
for mode in writeback writethrough; do
  start_nbdkit list-$mode --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
    delay-ms=1 export= export=a throttle-mode=$mode
  got=$(lists "$tmp/list-$mode.sock")
  case $mode in
    writeback) want="''" ;;
    writethrough) want="'' 'a'" ;;
  esac
  [ "$got" = "$want" ] || fail "$mode: the export list is $got, not $want"
  echo "ok: $mode lists $got"
  stop_nbdkit "$pid" 10
done

echo "$0: PASS"
