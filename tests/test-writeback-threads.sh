#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-mode=writeback sizes its writer threads from the backend's
# thread model, and their bounce buffers from their number.  The
# inflight test plugin (every write held 300 ms) counts the writes on
# the backend at once; a client puts 32 writes in the pool at once:
#
# - parallel, the default: 16 writers (nbdkit's request threads per
#   connection), so 16 writes of 4K on the backend at once (the fixed
#   4 of before drained a full pool at 0.59x of writethrough);
# - serialize_requests (nbdkit's noparallel filter): 4 writers, each
#   with its handle;
# - throttle-writeback-threads=3 overrides: 3;
# - writes of 64K span several pool buffers and go through the
#   writers' bounce buffers, 512K each with 16 writers (8M in all, as
#   4 writers of 2M locked before): 16 on the backend at once;
# - writes of 1M are larger than a bounce buffer: each reaches the
#   backend in two pieces of 512K, 64 backend writes in all.
# In every case the data read back after a flush is what was written
# (the plugin keeps it in a file), and the debug lines name the count
# and the bounce size.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"
requires $PY -c 'import nbd'
requires "$NBDKIT" --filter=noparallel null --dump-plugin
requires_writeback

# burst URI SIZE: 32 writes of SIZE bytes at distinct offsets, each of
# its own byte, sent at once, then a flush; then read them back.
burst ()
{
  $PY - "$1" "$2" <<'PYEOF'
import sys
import nbd

size = int(sys.argv[2])
h = nbd.NBD()
h.connect_uri(sys.argv[1])
bufs = [nbd.Buffer.from_bytearray(bytearray([i + 1]) * size)
        for i in range(32)]
cookies = [h.aio_pwrite(b, i * (1 << 20)) for i, b in enumerate(bufs)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    h.aio_command_completed(c)      # raises if the write failed
h.flush()
for i in range(32):
    got = h.pread(size, i * (1 << 20))
    if got != bytes([i + 1]) * size:
        raise SystemExit("write %d of %d bytes: read back different data"
                         % (i, size))
h.shutdown()
PYEOF
}

# case NAME WANT_WRITERS WANT_BOUNCE WANT_PEAK WANT_WRITES SIZE ARGS...:
# run the burst, stop nbdkit, and compare the writers and bounce size
# it logged, the backend's peak and its number of writes.
case_ ()
{
  local name=$1 writers=$2 bounce=$3 peak=$4 writes=$5 size=$6 got
  shift 6
  truncate -s 40M "$tmp/$name.img"
  start_nbdkit $name "$@" statefile="$tmp/$name.state" file="$tmp/$name.img" \
    throttle-mode=writeback throttle-capacity=64M
  burst "$uri" "$size" || fail "$name: the client failed"
  stop_nbdkit $pid 10
  grep -q "throttle: writeback: $writers writer threads per export" \
       "$tmp/$name.log" ||
    fail "$name: want $writers writer threads: $(grep 'writer threads' "$tmp/$name.log")"
  grep -q "$writers writers with $bounce-byte bounce buffers" \
       "$tmp/$name.log" ||
    fail "$name: want $bounce-byte bounce buffers: $(grep 'bounce buffers' "$tmp/$name.log")"
  got=$(sed -n 's/^peak_requests=//p' "$tmp/$name.state")
  echo "$name: $writers writers, peak $got writes on the backend (want $peak)"
  [ "$got" = "$peak" ] ||
    fail "$name: $got writes on the backend at once, want $peak"
  got=$(sed -n 's/^writes=//p' "$tmp/$name.state")
  [ "$got" = "$writes" ] ||
    fail "$name: $got writes reached the backend, want $writes"
}

case_ parallel 16 524288 16 32 4096 --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=300
case_ serialize-requests 4 2097152 4 32 4096 --filter="$THROTTLE_FILTER" \
  --filter=noparallel "$TEST_PLUGIN" serialize=requests delay-ms=300
case_ threads-3 3 2097152 3 32 4096 --filter="$THROTTLE_FILTER" "$TEST_PLUGIN" \
  delay-ms=300 throttle-writeback-threads=3
case_ bounce 16 524288 16 32 65536 --filter="$THROTTLE_FILTER" \
  "$TEST_PLUGIN" delay-ms=300
case_ pieces 16 524288 16 64 1048576 --filter="$THROTTLE_FILTER" \
  "$TEST_PLUGIN" delay-ms=300

echo "$0: PASS"
