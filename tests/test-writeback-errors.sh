#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-mode=writeback: a failure is reported to every flush that was
# waiting when it happened, however the flushes and the failures
# interleave (the kernel's errseq_t is the model).  On one connection
# two 4K writes at once, then flush A, then 100 ms later flush B, both
# waiting when something fails:
#
# - a writer's flush: without multi-conn each writer flushes its own
#   backend context, if it wrote since its last flush: the two writes,
#   each on the backend for 300 ms, keep both writers busy, so each
#   has one.  Handle 2 (the first writer) fails its first flush after
#   300 ms; every other handle takes 800 ms per flush.  B finds the
#   failed writer with nothing more to flush, a success at once, long
#   before A has heard from the slow writer: that success must not
#   hide the failure from A.
# - a background write (error filter under a 1 s delay): the first
#   flush to report it must not hide it from the other.
#
# Both must fail with EIO; the failure is then reported: a third flush
# succeeds, and nbdkit logs no unreported failure at exit.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'
for f in delay error; do
  requires "$NBDKIT" --filter=$f null --dump-plugin
done
requires_writeback

# two_flushes URI SETTLE_MS: two 4K writes, SETTLE_MS later flush A, 100
# ms later flush B, then when both are done a third flush.  Prints
# "first=E second=E third=E", E an errno name or ok.
two_flushes ()
{
  $PY - "$1" "$2" <<'PYEOF'
import errno, sys, time
import nbd

def name(e):
    return errno.errorcode.get(e.errnum, str(e.errnum))

h = nbd.NBD()
h.connect_uri(sys.argv[1])
writes = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b"w" * 4096)), o)
          for o in (0, 1 << 20)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in writes:
    h.aio_command_completed(c)      # raises if the write failed
time.sleep(int(sys.argv[2]) / 1000)
cookies = {"first": h.aio_flush()}
time.sleep(0.1)
cookies["second"] = h.aio_flush()
res = {}
while len(res) < 2:
    h.poll(-1)
    for n, c in cookies.items():
        if n in res:
            continue
        try:
            if h.aio_command_completed(c):
                res[n] = "ok"
        except nbd.Error as e:
            res[n] = name(e)
try:
    h.flush()
    res["third"] = "ok"
except nbd.Error as e:
    res["third"] = name(e)
h.shutdown()
print("first=%s second=%s third=%s" % (res["first"], res["second"],
                                       res["third"]))
PYEOF
}

check ()
{
  local what=$1 log=$2 out=$3
  echo "$what: $out"
  [ "$out" = "first=EIO second=EIO third=ok" ] ||
    fail "$what: expected both flushes to fail with EIO and the next to succeed, got: $out"
  if grep "no flush reported it" "$log"; then
    fail "$what: a failure went unreported"
  fi
}

# --- a writer's flush fails --------------------------------------------
start_nbdkit wflush --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=300 flush-fail=2 flush-delay-ms=800 \
  throttle-mode=writeback throttle-writeback-threads=2
out=$(two_flushes "$uri" 500)   # the write is on the backend before A
stop_nbdkit $pid
grep -q "inflight: failing the first flush on handle 2" "$tmp/wflush.log" ||
  fail "writer flush: the backend failed no flush (handle numbering changed?)"
check "writer flush" "$tmp/wflush.log" "$out"

# --- a background write fails ------------------------------------------
touch "$tmp/errors-on"
start_nbdkit bgwrite --filter="$THROTTLE_FILTER" --filter=delay --filter=error \
  memory 64M delay-write=1000ms error-pwrite=EIO error-pwrite-rate=100% \
  error-file="$tmp/errors-on" throttle-mode=writeback
out=$(two_flushes "$uri" 0)     # both flushes wait for the write
stop_nbdkit $pid
grep -q "background write of 4096 bytes at 0 .* failed" "$tmp/bgwrite.log" ||
  fail "background write: the write did not fail"
check "background write" "$tmp/bgwrite.log" "$out"

echo "$0: PASS"
