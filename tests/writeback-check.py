#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
# Client side of test-writeback.sh: each scenario asserts one promise of
# throttle-mode=writeback against a real nbdkit.  Needs the system
# python (the nbd module from python3-libnbd).
#
#   writeback-check.py SCENARIO SOCKET [FILE]
#
# FILE, where given, is the backend's file: what is in it is what the
# backend really has, whatever the filter would overlay.

import os
import random
import statistics
import struct
import sys
import time

import nbd

K = 1024


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def connect(sock):
    h = nbd.NBD()
    h.connect_unix(sock)
    return h


# Every 16 bytes numbered: a write that lands shifted, or another
# write's data, does not compare equal.
_SLOTS = 65536
_BIG = b"".join(struct.pack("<QQ", 0x7468726f74746c65, k)
                for k in range(_SLOTS + 4 * 1024 * K // 16))


def pat(seed, n):
    start = (seed * 7919) % _SLOTS * 16
    return _BIG[start:start + n]


def file_bytes(path, offset, count):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(count)


def latency(sock, label):
    """Print the median write latency, for the ratio the script prints."""
    h = connect(sock)
    lat = []
    data = [pat(i, 64 * K) for i in range(20)]
    for i in range(20):
        t = time.monotonic()
        h.pwrite(data[i], i * 64 * K)
        lat.append(time.monotonic() - t)
    t = time.monotonic()
    h.flush()
    fl = time.monotonic() - t
    for i in range(20):
        if h.pread(64 * K, i * 64 * K) != pat(i, 64 * K):
            fail("%s: data of write %d not read back" % (label, i))
    h.shutdown()
    print("%s median_write_ms=%.3f max_write_ms=%.3f flush_ms=%.1f" %
          (label, statistics.median(lat) * 1000, max(lat) * 1000, fl * 1000))
    return statistics.median(lat)


def overlay(sock):
    # One writer, busy 1 s with a write elsewhere: the write at 0 stays
    # queued, and the backend still has the old data there.
    h = connect(sock)
    h.pwrite(b"o" * (64 * K), 0)
    h.flush()
    h.pwrite(b"x" * (64 * K), 1024 * K)          # occupies the writer
    h.pwrite(b"N" * (8 * K), 4 * K)              # queued behind it
    h.pwrite(b"M" * (4 * K), 8 * K)              # newer, overlapping
    t = time.monotonic()
    got = h.pread(64 * K, 0)
    took = time.monotonic() - t
    want = b"o" * (4 * K) + b"N" * (4 * K) + b"M" * (4 * K) + \
        b"o" * (52 * K)
    if got != want:
        fail("overlay: a read of a range with pending writes did not return "
             "the newest data (first differing byte at %d)" %
             next(i for i in range(len(want)) if got[i] != want[i]))
    # The read did not wait for the queued write to reach the backend
    # (the writer was busy for 1 s): the data came from the overlay.
    if took > 0.5:
        fail("overlay: read took %.3f s: it waited for the backend" % took)
    # A read straddling pending and settled data.
    got = h.pread(16 * K, 2 * K)
    if got != want[2 * K:18 * K]:
        fail("overlay: straddling read wrong")
    h.flush()
    if h.pread(64 * K, 0) != want:
        fail("overlay: data wrong after flush")
    h.shutdown()
    print("overlay ok: read with pending writes took %.1f ms" % (took * 1000))


def control(ctl, cmd):
    """Pause ('p') or resume ('r') the pause filter below the throttle."""
    import socket
    # The pause filter's control thread can lose a command to a signal
    # (SIGTERM in the drain test interrupts its read); both commands
    # are idempotent, so ask again.
    for attempt in range(10):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(ctl)
        s.sendall(cmd.encode())
        got = s.recv(1)
        s.close()
        if got == cmd.upper().encode():
            return
        time.sleep(0.2)
    fail("pause-control did not acknowledge %r" % cmd)


def order(sock, path, ctl):
    # The backend is paused (pause filter): every write is pending when
    # the writers are released at once, and they race unless ordered.
    control(ctl, "p")
    h = connect(sock)
    size = 256 * K
    model = bytearray(file_bytes(path, 0, size))
    rnd = random.Random(3)
    for i in range(300):
        n = rnd.choice([4 * K, 8 * K, 64 * K, 512, 12 * K + 100])
        off = rnd.randrange(0, size - n)
        data = pat(i + 1, n)
        h.pwrite(data, off)
        model[off:off + n] = data
    control(ctl, "r")
    if h.pread(size, 0) != bytes(model):
        fail("order: read of pending writes differs from the client's order")
    h.flush()
    if file_bytes(path, 0, size) != bytes(model):
        fail("order: the backend's file differs from the client's order: "
             "overlapping writes were reordered")
    h.shutdown()
    print("order ok")


def zero_trim(sock, path, op):
    # Writes take 500 ms, zero and trim none: unordered, the zero would
    # reach the file first and the write would land over it.
    h = connect(sock)
    h.pwrite(b"W" * (64 * K), 0)
    h.pwrite(b"V" * (64 * K), 128 * K)
    if op == "zero":
        h.zero(32 * K, 0)
        h.zero(32 * K, 128 * K)
    else:
        h.trim(32 * K, 0)
        h.trim(32 * K, 128 * K)
    want = (b"\0" * (32 * K) + b"W" * (32 * K) + b"o" * (64 * K) +
            b"\0" * (32 * K) + b"V" * (32 * K))
    if h.pread(192 * K, 0) != want:
        fail("%s: read after %s differs" % (op, op))
    # Both writes were older than the zero/trim: they are on the file.
    if file_bytes(path, 0, 192 * K) != want:
        fail("%s: file after %s differs: the %s was not ordered after the "
             "older overlapping write" % (op, op, op))
    # A newer write over the trimmed range wins.
    h.pwrite(b"L" * (4 * K), 0)
    h.flush()
    if file_bytes(path, 0, 8 * K) != b"L" * (4 * K) + b"\0" * (4 * K):
        fail("%s: newer write lost" % op)
    h.shutdown()
    print("%s ok" % op)


def flush(sock, path):
    # Writes take 200 ms; 16 writes on connection A, a flush on B.
    a = connect(sock)
    b = connect(sock)
    if not a.can_multi_conn():
        fail("flush: the export lost can_multi_conn in writeback mode")
    for i in range(16):
        a.pwrite(pat(i + 10, 64 * K), i * 64 * K)
    if file_bytes(path, 0, 64 * K) == pat(10, 64 * K):
        print("flush: note: first write already on file before the flush")
    t = time.monotonic()
    b.flush()
    took = time.monotonic() - t
    for i in range(16):
        if file_bytes(path, i * 64 * K, 64 * K) != pat(i + 10, 64 * K):
            fail("flush: after a flush on another connection, write %d "
                 "acknowledged before it is not on the backend" % i)
    a.shutdown()
    b.shutdown()
    print("flush ok: flush on B waited %.3f s for A's writes" % took)


def fua(sock, path):
    h = connect(sock)
    if not h.can_fua():
        fail("fua: export has no FUA")
    h.pwrite(b"X" * (64 * K), 0)                  # pending
    t = time.monotonic()
    h.pwrite(b"Y" * (4 * K), 0, nbd.CMD_FLAG_FUA)
    took = time.monotonic() - t
    if file_bytes(path, 0, 64 * K) != b"Y" * (4 * K) + b"X" * (60 * K):
        fail("fua: a FUA write (and the older write under it) was not on "
             "the backend when it was acknowledged")
    h.shutdown()
    print("fua ok: FUA write took %.3f s" % took)


def errors(sock, errfile):
    a = connect(sock)
    b = connect(sock)
    open(errfile, "w").close()                     # backend now fails
    a.pwrite(b"E" * (4 * K), 0)                    # acknowledged anyway
    try:
        a.flush()
        fail("errors: flush after a failed background write succeeded")
    except nbd.Error as e:
        if e.errnum != 5:
            fail("errors: flush failed with %s, not EIO" % e)
    try:
        b.flush()
        fail("errors: the other connection's flush did not report it")
    except nbd.Error:
        pass
    a.flush()                                      # reported once each
    b.flush()
    c = connect(sock)
    c.flush()                      # opened after it was reported: clean
    # A write that fails after every client has gone: the next flush on
    # the export, on a new connection, still reports it.
    a.pwrite(b"F" * (4 * K), 8 * K)
    a.shutdown()
    b.shutdown()
    c.shutdown()
    time.sleep(1)                  # the failing write is long done
    os.unlink(errfile)
    d = connect(sock)
    try:
        d.flush()
        fail("errors: failure before every client left was never reported")
    except nbd.Error:
        pass
    d.flush()
    d.pwrite(b"G" * (4 * K), 0)
    d.flush()
    if d.pread(4 * K, 0) != b"G" * (4 * K):
        fail("errors: good write after recovery lost")
    d.shutdown()
    print("errors ok")


def drain(sock):
    h = connect(sock)
    for i in range(8):
        h.pwrite(pat(i + 40, 64 * K), i * 64 * K)
    # Send NBD_CMD_DISC without waiting: the server's side of a clean
    # disconnect waits for the pending writes, which are paused.
    h.aio_disconnect(0)
    del h
    print("drain: 8 writes acknowledged, disconnected")


def drain_check(path):
    for i in range(8):
        if file_bytes(path, i * 64 * K, 64 * K) != pat(i + 40, 64 * K):
            fail("drain: acknowledged write %d is not on the backend after "
                 "a clean shutdown" % i)
    print("drain ok")


def budget(sock):
    # capacity 256K, writes take 500 ms: the 5th 64K write waits.
    h = connect(sock)
    lat = []
    data = [pat(i, 64 * K) for i in range(6)]
    for i in range(6):
        t = time.monotonic()
        h.pwrite(data[i], i * 64 * K)
        lat.append(time.monotonic() - t)
    if max(lat[:4]) > 0.25:
        fail("budget: writes within the budget waited: %r" % lat)
    if lat[4] < 0.3:
        fail("budget: write beyond the budget did not wait: %r" % lat)
    h.flush()
    h.shutdown()
    print("budget ok: 5th write waited %.3f s" % lat[4])


def hammer(sock, path, clients, ops):
    """Clients at once, each on a region of its own with its own model,
    and each op checked: exercises the queue, the overlay and the
    barriers from many threads (run under TSan too).  Some writes are
    larger than the pool (written through) or span several buffers.
    """
    import threading
    region = 4 * 1024 * K
    errors = []

    def client(n):
        try:
            rnd = random.Random(n)
            h = connect(sock)
            base = n * region
            model = bytearray(region)
            h.zero(region, base)
            for i in range(ops):
                op = rnd.random()
                if op < 0.5:
                    size = rnd.choice([512, 4 * K, 4 * K + 1, 64 * K,
                                       300 * K, 3 * 1024 * K])
                    off = rnd.randrange(0, region - size)
                    data = pat(n * 1000 + i, size)
                    flags = nbd.CMD_FLAG_FUA if rnd.random() < 0.1 else 0
                    h.pwrite(data, base + off, flags)
                    model[off:off + size] = data
                elif op < 0.6:
                    size = rnd.choice([4 * K, 64 * K, 1024 * K])
                    off = rnd.randrange(0, region - size)
                    h.zero(size, base + off)
                    model[off:off + size] = bytes(size)
                elif op < 0.65:
                    size = rnd.choice([4 * K, 64 * K])
                    off = rnd.randrange(0, region - size)
                    h.trim(size, base + off)
                    model[off:off + size] = bytes(size)
                elif op < 0.7:
                    h.flush()
                else:
                    size = rnd.choice([512, 4 * K, 64 * K, 1024 * K])
                    off = rnd.randrange(0, region - size)
                    if h.pread(size, base + off) != model[off:off + size]:
                        raise Exception("client %d op %d: read of %d at %d "
                                        "is not what it wrote" %
                                        (n, i, size, off))
            h.flush()
            if file_bytes(path, base, region) != bytes(model):
                raise Exception("client %d: backend differs after flush" % n)
            h.shutdown()
        except Exception as e:
            errors.append(str(e))

    ts = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    t = time.monotonic()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    if errors:
        fail("hammer: " + "; ".join(errors))
    print("hammer ok: %d clients x %d ops in %.1f s" %
          (clients, ops, time.monotonic() - t))


def extents(sock):
    """Block status of a range with a pending write reports data, never
    the hole the backend still has; and nothing past the range asked,
    where writes may be pending too."""
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_unix(sock)
    h.pwrite(b"D" * (64 * K), 1024 * K)           # pending for 1 s
    seen = []

    def cb(metacontext, offset, entries, err):
        if metacontext == nbd.CONTEXT_BASE_ALLOCATION:
            seen.append((offset, list(entries)))
        return 0

    h.block_status(512 * K, 0, cb)                # before the write
    off, ents = seen[-1]
    total = sum(ents[0::2])
    if off + total > 1024 * K and any(
            f & nbd.STATE_HOLE for f in ents[1::2]):
        # A hole reported over the pending write would mislead.
        pos = off
        for length, f in zip(ents[0::2], ents[1::2]):
            if pos < 1088 * K and pos + length > 1024 * K and \
               f & nbd.STATE_HOLE:
                fail("extents: pending write reported as a hole "
                     "past the range asked")
            pos += length
    h.block_status(64 * K, 1024 * K, cb)
    off, ents = seen[-1]
    pos = off
    for length, f in zip(ents[0::2], ents[1::2]):
        if pos < 1088 * K and f & (nbd.STATE_HOLE | nbd.STATE_ZERO):
            fail("extents: a range with a pending write reported as "
                 "hole/zero (flags %d at %d)" % (f, pos))
        pos += length
    h.shutdown()
    print("extents ok")


def main():
    s = sys.argv[1]
    if s == "latency":
        latency(sys.argv[2], sys.argv[3])
    elif s == "overlay":
        overlay(sys.argv[2])
    elif s == "order":
        order(sys.argv[2], sys.argv[3], sys.argv[4])
    elif s == "control":
        control(sys.argv[2], sys.argv[3])
    elif s in ("zero", "trim"):
        zero_trim(sys.argv[2], sys.argv[3], s)
    elif s == "flush":
        flush(sys.argv[2], sys.argv[3])
    elif s == "fua":
        fua(sys.argv[2], sys.argv[3])
    elif s == "errors":
        errors(sys.argv[2], sys.argv[3])
    elif s == "drain":
        drain(sys.argv[2])
    elif s == "drain-check":
        drain_check(sys.argv[2])
    elif s == "hammer":
        hammer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif s == "extents":
        extents(sys.argv[2])
    elif s == "budget":
        budget(sys.argv[2])
    else:
        fail("unknown scenario " + s)


main()
