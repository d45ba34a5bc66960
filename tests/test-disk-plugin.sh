#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The allocation-free disk plugin against a real nbdkit: refusals at
# start, data through O_DIRECT, FUA, flush, zero, misaligned requests,
# block size advertisement, a block device, the system calls behind FUA
# and flush, the locked pool, and no page faults per request.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_DISK_PLUGIN"
requires nbdcopy --version
requires "$PY" -c 'import nbd'
requires fallocate --version
plugin=$THROTTLE_DISK_PLUGIN
sanitized=
case "${SANITIZERS:-no}" in no|"") ;; *) sanitized=yes ;; esac

# stop_disk PID: stop_nbdkit, except in a sanitizer build: nbdkit 1.32
# with libasan preloaded hangs in exit (libp11-kit's destructor waits
# for glibc's setlocale lock) once a request has failed, with or
# without this plugin, so there it is killed after 5 s.
stop_disk ()
{
  local p=$1
  if [ -z "$sanitized" ]; then stop_nbdkit "$p"; return; fi
  kill -TERM "$p"
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  echo "$0: nbdkit (pid $p) still running 5 s after SIGTERM (sanitizer build): killed"
  kill -KILL "$p"
}

# O_DIRECT must work where the test files live (tmpfs refuses it
# before Linux 6.6).
dd if=/dev/zero of="$tmp/probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null ||
  { echo "$0: SKIP: $tmp does not support O_DIRECT"; exit 77; }

# refused EXPECTED-REGEX ARGS...: nbdkit must exit non-zero at start
# with a message matching EXPECTED-REGEX.
refused ()
{
  local want=$1; shift
  if timeout 30 "$NBDKIT" -f -U - "$plugin" "$@" --run true >"$tmp/refused.log" 2>&1; then
    cat "$tmp/refused.log"
    fail "nbdkit started with $*"
  fi
  grep -Eq "$want" "$tmp/refused.log" ||
    { cat "$tmp/refused.log"; fail "no message matching '$want' for $*"; }
  echo "refused ($*): $(grep error "$tmp/refused.log" | head -1)"
}

fallocate -l 64M "$tmp/disk.img"
truncate -s 16M "$tmp/sparse.img"
fallocate -l 16M "$tmp/holed.img"
fallocate -p -o 4M -l 64K "$tmp/holed.img"
fallocate -l 16M "$tmp/odd.img"
truncate -s $((16 * 1024 * 1024 - 512)) "$tmp/odd.img"

refused 'file=PATH parameter is required'
refused "$tmp/missing.img.*No such file" file="$tmp/missing.img"
refused "$tmp/sparse.img: the file has holes .*offset 0.*fallocate" file="$tmp/sparse.img"
refused "$tmp/holed.img: the file has holes .*offset 4194304.*fallocate" file="$tmp/holed.img"
refused "$tmp/odd.img: size 16776704 is not a non-zero multiple of 4096" file="$tmp/odd.img"
refused "trim=true needs a block device" file="$tmp/disk.img" trim=true
# A value that is no size or boolean: nbdkit's parser says why in its
# own release's words, and our line names the parameter.
refused "buffer-size=-1: not a size" file="$tmp/disk.img" buffer-size=-1
refused "mlock=maybe: expected a boolean" file="$tmp/disk.img" mlock=maybe
refused "pool=0" file="$tmp/disk.img" pool=0
refused "buffer-size=1000: must be a multiple of 4096" file="$tmp/disk.img" buffer-size=1000
refused "not a block device or a regular file" file=/dev/null

# --- data, FUA, flush, zero, misaligned requests ----------------------
# A small pool so that the 4 x 16 requests of nbdcopy below wait for
# buffers.
start_nbdkit disk "$plugin" file="$tmp/disk.img" pool=4 -D throttle-disk.verbose=1

"$PY" - "$uri" "$tmp/disk.img" <<'EOF'
import errno, os, sys
import nbd

uri, backing = sys.argv[1], sys.argv[2]
h = nbd.NBD()
h.set_strict_mode(0)          # let misaligned and oversized requests through
h.connect_uri(uri)

def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)

def on_disk(off, n):
    # What is in the file itself, not what the server says: O_DIRECT
    # writes invalidate the page cache, so a buffered read sees them.
    with open(backing, "rb") as f:
        f.seek(off)
        return f.read(n)

sizes = [h.get_block_size(s) for s in
         (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM)]
check(sizes == [4096, 4096, 256 * 1024], "block sizes %s" % sizes)
check(h.get_size() == 64 * 1024 * 1024, "size %d" % h.get_size())
check(h.can_multi_conn() and h.can_fua() and h.can_flush() and h.can_zero(),
      "multi-conn, fua, flush, zero not all advertised")
check(not h.can_trim(), "trim advertised on a file")
check(not h.can_fast_zero(), "fast zero advertised")

# A write larger than the bounce buffer is split, not refused.
data = os.urandom(3 * 1024 * 1024 + 4096)
h.pwrite(data, 1024 * 1024)
check(h.pread(len(data), 1024 * 1024) == data, "large write read back")
check(on_disk(1024 * 1024, len(data)) == data, "large write not in the file")

fua = os.urandom(8192)
h.pwrite(fua, 40960, nbd.CMD_FLAG_FUA)
check(on_disk(40960, 8192) == fua, "FUA write not in the file")
h.flush()

h.zero(2 * 1024 * 1024, 1024 * 1024)
check(on_disk(1024 * 1024, 2 * 1024 * 1024) == bytes(2 * 1024 * 1024),
      "zeroed range not zero in the file")
check(h.pread(4096, 3 * 1024 * 1024) == data[2 * 1024 * 1024:2 * 1024 * 1024 + 4096],
      "zero went past its range")
h.zero(8192, 0, nbd.CMD_FLAG_FUA)
check(on_disk(0, 8192) == bytes(8192), "FUA zero not in the file")

for what, call in (
        ("pread", lambda: h.pread(4096, 4097)),
        ("pread", lambda: h.pread(512, 8192)),
        ("pwrite", lambda: h.pwrite(b"x" * 4096, 100)),
        ("zero", lambda: h.zero(1000, 4096))):
    try:
        call()
        sys.exit("FAIL: misaligned %s succeeded" % what)
    except nbd.Error as e:
        # nbd.Error.errno is the symbolic name in libnbd 1.14.
        check(e.errno in (errno.EINVAL, "EINVAL"),
              "misaligned %s: errno %s, want EINVAL" % (what, e.errno))
print("data, FUA, flush, zero, block sizes, misaligned requests: ok")
h.shutdown()
EOF

for want in "pread: misaligned request: offset 4097 count 4096" \
            "pread: misaligned request: offset 8192 count 512" \
            "pwrite: misaligned request: offset 100 count 4096" \
            "zero: misaligned request: offset 4096 count 1000" \
            "debug: pwrite count=8192 offset=40960 fua\$" \
            "debug: zero count=8192 offset=0 fua\$"; do
  # (The plugin's own lines: nbdkit's core logs "throttle-disk: pwrite ...".)
  grep -q "$want" "$tmp/disk.log" || { cat "$tmp/disk.log"; fail "log lacks '$want'"; }
done
echo "misaligned requests named in the log; -D throttle-disk.verbose=1 works"

# Many connections and requests in flight, more than the pool has
# buffers; the file itself holds the data.
head -c $((48 * 1024 * 1024)) /dev/urandom >"$tmp/in"
truncate -s 64M "$tmp/in"
nbdcopy --connections=4 --requests=16 --request-size=262144 "$tmp/in" "$uri"
nbdcopy "$uri" "$tmp/out"
cmp "$tmp/in" "$tmp/out" || fail "nbdcopy: data read back differs"
cmp "$tmp/in" "$tmp/disk.img" || fail "nbdcopy: the file differs from what was written"
echo "nbdcopy: 64M round trip intact, 4 connections, pool=4"
stop_disk "$pid"

# Still fully allocated: the plugin accepts it again (it refuses holes).
timeout 30 "$NBDKIT" -f -U - "$plugin" file="$tmp/disk.img" --run true ||
  fail "the served file no longer passes the start checks"

# --- a block device: a loop device, if this machine lets us make one ---
fallocate -l $((16 * 1024 * 1024 + 512)) "$tmp/blk.img"
if loop=$(losetup -f --show "$tmp/blk.img" 2>/dev/null); then
  trap 'losetup -d "$loop" 2>/dev/null || :; _cleanup' EXIT
  start_nbdkit blk "$plugin" file="$loop" trim=true
  # Exclusive: a second server (or a mount, or swapon) is refused.
  refused "$loop: device is busy" file="$loop"
  "$PY" - "$uri" <<'EOF'
import os, sys
import nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
# The last 512 bytes are not a whole 4096 byte block.
assert h.get_size() == 16 * 1024 * 1024, h.get_size()
assert h.can_trim() and h.can_fua() and h.can_multi_conn()
data = os.urandom(1024 * 1024)
h.pwrite(data, 4096, nbd.CMD_FLAG_FUA)
assert h.pread(len(data), 4096) == data
h.zero(65536, 4096)
assert h.pread(65536, 4096) == bytes(65536)
h.trim(512 * 1024, 512 * 1024)      # BLKDISCARD
h.flush()
print("block device: size, FUA, zero, trim, flush: ok")
h.shutdown()
EOF
  stop_nbdkit "$pid"
else
  echo "$0: no loop device here (losetup failed): block device part not run"
fi

# --- FUA and flush reach the disk: the system calls themselves ----------
if strace -V >/dev/null 2>&1; then
  sock=$tmp/strace.sock
  strace -f -qq -e trace=openat,pwrite64,fdatasync -o "$tmp/strace.out" \
    "$NBDKIT" -f -U "$sock" -P "$tmp/strace.pid" "$plugin" file="$tmp/disk.img" \
    >"$tmp/strace.log" 2>&1 &
  spid=$!
  _pids+=("$spid")
  wait_for_socket "$sock" "$spid" ||
    { cat "$tmp/strace.log"; fail "nbdkit under strace did not start"; }
  npid=$(cat "$tmp/strace.pid")
  nthreads=$(ls "/proc/$npid/task" | wc -l)
  "$PY" - "$sock" <<'EOF'
import sys
import nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
h.pwrite(b"a" * 4096, 12288)
h.pwrite(b"b" * 8192, 1048576, nbd.CMD_FLAG_FUA)
h.zero(4096, 2097152, nbd.CMD_FLAG_FUA)
h.flush()
h.shutdown()
EOF
  # SIGTERM only once the connection's threads are gone: under strace
  # -f each thread's exit stops for the tracer, and a SIGTERM the kernel
  # gives to a thread on its way out is lost under ThreadSanitizer,
  # which holds a signal until the thread's next intercepted call, and
  # an exiting thread makes none (a CI run's TSan pass: nbdkit idle in
  # poll for 20 minutes after the SIGTERM).
  for _ in $(seq 300); do
    [ "$(ls "/proc/$npid/task" | wc -l)" -le "$nthreads" ] && break
    sleep 0.1
  done
  kill -TERM "$npid"
  wait "$spid" || :
  s=$tmp/strace.out
  d=$(sed -n 's/.*openat(.*disk\.img", O_RDWR|O_DIRECT|O_CLOEXEC) = \([0-9]*\).*/\1/p' "$s")
  y=$(sed -n 's/.*openat(.*disk\.img", O_RDWR|O_DSYNC|O_DIRECT|O_CLOEXEC) = \([0-9]*\).*/\1/p' "$s")
  if [ -z "$d" ] || [ -z "$y" ]; then cat "$s"; fail "no O_DIRECT and O_DIRECT|O_DSYNC descriptors"; fi
  grep -Eq "pwrite64\($d, .*, 4096, 12288" "$s" || { cat "$s"; fail "plain write not on the O_DIRECT descriptor"; }
  grep -Eq "pwrite64\($y, .*, 8192, 1048576" "$s" || { cat "$s"; fail "FUA write not on the O_DSYNC descriptor"; }
  grep -Eq "pwrite64\($y, .*, 4096, 2097152" "$s" || { cat "$s"; fail "FUA zero not on the O_DSYNC descriptor"; }
  grep -Eq "fdatasync\($d(\) += 0| <unfinished)" "$s" || { cat "$s"; fail "flush did not fdatasync"; }
  echo "strace: writes on fd $d (O_DIRECT), FUA on fd $y (O_DIRECT|O_DSYNC), flush = fdatasync($d)"
else
  echo "$0: strace not installed: the FUA/flush system call check was not run"
fi

if [ -n "$sanitized" ]; then
  echo "$0: sanitizer build: mlock is a no-op and malloc is replaced;" \
       "skipping the VmLck and page fault checks"
  exit 0
fi

# --- the pool is locked ------------------------------------------------
start_nbdkit lock "$plugin" file="$tmp/disk.img" pool=8 buffer-size=128K
vmlck=$(awk '/^VmLck:/ {print $2}' "/proc/$pid/status")
want=$(( (8 + 1) * 128 ))       # pool + zero buffer, kB
[ "$vmlck" -ge $want ] || fail "VmLck ${vmlck} kB < $want kB"
grep -Eq "pool 8 x 131072 bytes, [0-9]+ bytes locked" "$tmp/lock.log" ||
  fail "the locked size is not in the debug output"
# Its own code and data too (its globals are read by every request).
grep -Eq "locked after fork: .* plugin code and data [1-9][0-9]* bytes" "$tmp/lock.log" ||
  { cat "$tmp/lock.log"; fail "the plugin did not lock its own segments"; }
echo "pool locked: VmLck ${vmlck} kB (>= $want kB)"
stop_nbdkit "$pid"

# --- no page faults per request ----------------------------------------
# A request that allocates or touches memory nobody reserved faults in
# a page; under memory pressure that fault is the deadlock.  glibc
# reuses freed memory, so a malloc per request would fault only when
# its pages had been given back; fixing the mmap threshold at 64K makes
# every allocation of 64K or more map (and fault in) fresh pages, so it
# shows.  Two identical passes on one connection: the first warms up
# nbdkit (its per-thread request buffer grows once), the second must
# not fault.  Without -v: nbdkit's debug messages allocate.
# (Adding malloc (65536) + memset + free to .pwrite: 5100 faults in the
# second pass of 600 requests; 0 without.)
sock=$tmp/faults.sock
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=0:glibc.malloc.top_pad=0 \
  "$NBDKIT" -f -U "$sock" -t 1 "$plugin" file="$tmp/disk.img" >"$tmp/faults.log" 2>&1 &
pid=$!
_pids+=("$pid")
wait_for_socket "$sock" "$pid" ||
  { cat "$tmp/faults.log"; fail "nbdkit (faults) did not start"; }

"$PY" - "$sock" "$pid" 100 <<'EOF' | tee "$tmp/faults.out"
import os, sys
import nbd

sock, pid, reqs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def minflt():
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[7])    # field 10: minflt

h = nbd.NBD()
h.set_strict_mode(0)
h.connect_unix(sock)
size = h.get_size()
big = os.urandom(1024 * 1024)

def one_pass():
    for i in range(reqs):
        off = (i * 1024 * 1024) % (size - 1024 * 1024)
        h.pwrite(big[:256 * 1024], off)
        h.pwrite(big, off)                  # split into bounce buffers
        assert h.pread(256 * 1024, off) == big[:256 * 1024]
        assert h.pread(1024 * 1024, off) == big
        h.pwrite(big[:4096], off, nbd.CMD_FLAG_FUA)
        h.zero(512 * 1024, off)
        if i % 16 == 0:
            h.flush()

one_pass()
before = minflt()
one_pass()
print("faults first_pass_total=%d second_pass=%d requests=%d"
      % (before, minflt() - before, reqs * 6 + reqs // 16 + 1))
h.shutdown()
EOF
faults=$(sed -n 's/.*second_pass=\([0-9]*\).*/\1/p' "$tmp/faults.out")
[ -n "$faults" ] || fail "no fault count"
# One 64K allocation per request would add >= 16 faults per request.
[ "$faults" -lt 64 ] || fail "$faults page faults in the second pass: something allocates per request"
stop_nbdkit "$pid"
echo "no allocation per request: $faults faults in the second pass"
