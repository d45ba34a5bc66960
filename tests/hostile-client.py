#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Hostile and unlucky NBD clients, and the helpers of the hardening
tests (test-faults.sh, test-hostile.sh, test-signals.sh, test-soak.sh).

Raw clients speak the fixed-newstyle handshake by hand so that they can
misbehave in ways libnbd never would:

  partial SOCK SIZE SENT       a write request of SIZE bytes of which only
                               SENT bytes of payload are sent; then close
  vanish SOCK SIZE [CTL N]     one write of SIZE, then close at once
                               without reading the reply (with CTL, once
                               the control socket shows N waiters)
  queued SOCK HOW N SIZE [PAUSE]
                               N pipelined writes of SIZE (handle i at
                               offset i*SIZE), PAUSE seconds (0.3), then
                               HOW: disc (NBD_CMD_DISC and shutdown the
                               write side, as libnbd does), halfclose
                               (shutdown the write side) or vanish
                               (close, read nothing); prints "reply
                               HANDLE ERRNO" for every reply read until
                               the server closes; fails unless each
                               write had one
  vanishers SOCK CLIENTS N SIZE  CLIENTS at once, each queued ... vanish
  flood SOCK N SIZE SECS       N writes of SIZE and reads of 64K, no
                               reply read for SECS seconds, then read
                               them all and disconnect cleanly
Libnbd helpers:
  flushload URI ...            writes/zeroes/trims, then flushes in
                               rounds (see run_flushload)
  ackwrite URI FILE            distinct blocks until the connection dies,
                               each acknowledged block index to FILE
  verify URI FILE              every block listed in FILE reads back
  stats SOCK OUT SECS          poll the control socket, check the
                               invariant in_flight <= capacity each time
"""

import json
import os
import socket
import struct
import sys
import threading
import time

NBD_OPT_GO = 7
NBD_REP_ACK = 1
NBD_CMD_READ = 0
NBD_CMD_WRITE = 1
NBD_CMD_DISC = 2
REQ_MAGIC = 0x25609513
REPLY_MAGIC = 0x67446698
OPT_REPLY_MAGIC = 0x3e889045565a9


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("server closed the connection")
        buf += chunk
    return buf


def handshake(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    hdr = recv_exact(s, 18)
    if hdr[:16] != b"NBDMAGICIHAVEOPT":
        raise SystemExit("not a newstyle NBD server")
    s.sendall(struct.pack(">I", 3))        # FIXED_NEWSTYLE | NO_ZEROES
    name = b""
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(b"IHAVEOPT" + struct.pack(">II", NBD_OPT_GO, len(data)) + data)
    while True:
        magic, opt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
        if magic != OPT_REPLY_MAGIC:
            raise SystemExit("bad option reply magic")
        recv_exact(s, length)
        if rtype == NBD_REP_ACK:
            return s
        if rtype & 0x80000000:
            raise SystemExit("NBD_OPT_GO refused: %#x" % rtype)


def request(cmd, handle, offset, length):
    return struct.pack(">IHHQQI", REQ_MAGIC, 0, cmd, handle, offset, length)


def read_reply(s):
    magic, err, handle = struct.unpack(">IIQ", recv_exact(s, 16))
    if magic != REPLY_MAGIC:
        raise SystemExit("unexpected reply magic %#x" % magic)
    return err, handle


def cmd_partial(path, size, sent):
    s = handshake(path)
    s.sendall(request(NBD_CMD_WRITE, 1, 0, size) + b"\xaa" * sent)
    time.sleep(0.2)
    s.close()
    print("partial: sent %d of %d payload bytes, closed" % (sent, size))


def control_stat(ctl, field):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(ctl)
    c.sendall(b"stats\n")
    v = json.loads(c.makefile("rb").readline())["exports"][0][field]
    c.close()
    return v


def cmd_vanish(path, size, ctl=None, waiters=0):
    s = handshake(path)
    s.sendall(request(NBD_CMD_WRITE, 1, 0, size) + b"\xbb" * size)
    # With CTL: close only once the write waits in the filter.  nbdkit
    # itself fails with ESHUTDOWN, without passing it down, a request
    # that one of its threads read while another already saw the
    # client's close; the filter's promise starts once the write is in.
    deadline = time.monotonic() + 30
    while ctl and control_stat(ctl, "waiters") < waiters:
        if time.monotonic() > deadline:
            raise SystemExit("vanish: the write never waited for credit")
        time.sleep(0.05)
    # Nothing read: the reply, whenever it comes, finds no one.
    s.close()
    print("vanish: one write of %d sent, closed" % size)


def queue_writes(path, n, size):
    s = handshake(path)
    for i in range(n):
        payload = struct.pack(">Q", i) * (size // 8)
        s.sendall(request(NBD_CMD_WRITE, i, i * size, size) + payload)
    return s


def cmd_queued(path, how, n, size, pause):
    s = queue_writes(path, n, size)
    if how == "vanish":
        s.close()
        print("queued: %d writes of %d sent, closed" % (n, size))
        return
    # Give the server PAUSE seconds to start on the writes before it
    # sees the end.  (However long, nbdkit may fail with ESHUTDOWN a
    # write it read but had not started when the end came: the caller
    # tells that loss from its own.)
    time.sleep(pause)
    if how == "disc":
        # As libnbd does: NBD_CMD_DISC, then no more to send.  Since
        # nbdkit 1.33.3 a worker waits in recv() after NBD_CMD_DISC
        # until the client shuts its side, so without the shutdown
        # neither side would ever close.
        s.sendall(request(NBD_CMD_DISC, n, 0, 0))
        s.shutdown(socket.SHUT_WR)
    elif how == "halfclose":
        s.shutdown(socket.SHUT_WR)
    else:
        raise SystemExit("queued: HOW is disc, halfclose or vanish")
    # Every reply the server sends after it, until it closes.
    replies = {}
    try:
        while True:
            err, handle = read_reply(s)
            replies[handle] = err
    except EOFError:
        pass
    s.close()
    for handle in sorted(replies):
        print("reply %d %d" % (handle, replies[handle]))
    print("queued: %d writes of %d then %s: %d replies read, %d errors"
          % (n, size, how, len(replies),
             sum(1 for e in replies.values() if e)))
    if len(replies) != n:
        sys.exit(1)


def cmd_vanishers(path, clients, n, size):
    socks = [queue_writes(path, n, size) for _ in range(clients)]
    for s in socks:
        s.close()
    print("vanishers: %d clients queued %d writes of %d each, closed"
          % (clients, n, size))


def cmd_flood(path, n, size, secs):
    """Alternately a write of SIZE and a read of 64K, N requests, no
    reply read for SECS seconds: the read replies (N/2 x 64K) fill the
    socket buffers, so nbdkit's threads block sending them."""
    s = handshake(path)
    payload = b"\xcc" * size
    sent = 0

    def sender():
        nonlocal sent
        for i in range(n):
            off = (i * 65536) % (1 << 28)
            if i % 2 == 0:
                s.sendall(request(NBD_CMD_WRITE, i, off, size) + payload)
            else:
                s.sendall(request(NBD_CMD_READ, i, off, 65536))
            sent += 1

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    time.sleep(secs)
    # Now read everything, which also unblocks the sender.
    errors = 0
    for _ in range(n):
        err, handle = read_reply(s)
        errors += err != 0
        if handle % 2 == 1 and err == 0:
            recv_exact(s, 65536)
    t.join()
    s.sendall(request(NBD_CMD_DISC, 0, 0, 0))
    s.close()
    print("flood: %d requests (writes of %d, reads of 65536), replies read "
          "after %.1f s, %d errors" % (n, size, secs, errors))
    sys.exit(0 if errors == 0 else 1)


def cmd_stats(path, out, secs):
    """Poll 'stats' until SECS have passed or the server goes; fail on
    any reading with in_flight > capacity."""
    deadline = time.monotonic() + secs
    polls = bad = 0
    max_in_flight = 0
    capacity = None
    last_error = None
    while time.monotonic() < deadline:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            f = s.makefile("rwb")
            while time.monotonic() < deadline:
                f.write(b"stats\n")
                f.flush()
                line = f.readline()
                if not line:
                    break
                doc = json.loads(line)
                for e in doc.get("exports", []):
                    polls += 1
                    capacity = e["capacity"]
                    max_in_flight = max(max_in_flight, e["in_flight"])
                    if e["in_flight"] > e["capacity"]:
                        bad += 1
                        print("stats: VIOLATION in_flight=%d capacity=%d"
                              % (e["in_flight"], e["capacity"]))
                time.sleep(0.02)
            s.close()
        except (OSError, ValueError) as e:
            last_error = str(e)
            time.sleep(0.1)
    with open(out, "w") as fp:
        fp.write("polls=%d\nviolations=%d\nmax_in_flight=%d\ncapacity=%s\n"
                 "last_error=%s\n" % (polls, bad, max_in_flight, capacity,
                                      last_error))
    sys.exit(1 if bad else 0)


def nbd_handle(uri):
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def run_flushload(uri, conns, count, size, errfile):
    """Each connection: 'count' writes/zeroes/trims (depth 8, errors
    counted), then flush 1; all wait; the error file is removed; flush 2;
    flush 3.  Prints one JSON line per connection."""
    import nbd
    barrier = threading.Barrier(conns + 1)
    after_off = threading.Event()
    results = [None] * conns

    def flush(h):
        try:
            h.flush()
            return 0
        except nbd.Error as e:
            return e.errnum or -1

    def conn(idx):
        h = nbd_handle(uri)
        buf = nbd.Buffer.from_bytearray(bytearray([idx + 1]) * size)
        ok = failed = 0
        inflight = 0
        sent = 0
        ops = ["write", "write", "zero", "write", "trim"]

        def done(err):
            nonlocal ok, failed, inflight
            inflight -= 1
            if err.value:
                failed += 1
                err.value = 0
            else:
                ok += 1
            return 1

        while sent < count or inflight:
            while sent < count and inflight < 8:
                off = ((idx * count + sent) * size) % (32 << 20)
                op = ops[sent % len(ops)]
                if op == "write":
                    h.aio_pwrite(buf, off, completion=done)
                elif op == "zero":
                    h.aio_zero(size, off, completion=done)
                else:
                    h.aio_trim(size, off, completion=done)
                sent += 1
                inflight += 1
            h.poll(1000)
        f1 = flush(h)
        barrier.wait()
        after_off.wait()
        f2 = flush(h)
        f3 = flush(h)
        h.shutdown()
        results[idx] = dict(conn=idx, ok=ok, failed=failed,
                            flush1=f1, flush2=f2, flush3=f3)

    threads = [threading.Thread(target=conn, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    barrier.wait()
    if errfile and os.path.exists(errfile):
        os.unlink(errfile)
    # Let the writers finish what is pending with errors off.
    time.sleep(0.5)
    after_off.set()
    for t in threads:
        t.join()
    for r in results:
        print(json.dumps(r))


BLOCK = 65536


def block_data(i):
    return (b"%08d" % i) * (BLOCK // 8)


def cmd_ackwrite(uri, ackfile):
    import nbd
    h = nbd_handle(uri)
    nblocks = h.get_size() // BLOCK
    fp = open(ackfile, "w")
    inflight = 0
    nxt = 0
    dead = False

    def make_done(i):
        def done(err):
            nonlocal inflight, dead
            inflight -= 1
            if err.value == 0:
                fp.write("%d\n" % i)
                fp.flush()
            else:
                dead = True
                err.value = 0
            return 1
        return done

    try:
        while not dead:
            while inflight < 16 and nxt < nblocks:
                buf = nbd.Buffer.from_bytearray(bytearray(block_data(nxt)))
                h.aio_pwrite(buf, nxt * BLOCK, completion=make_done(nxt))
                nxt += 1
                inflight += 1
            if nxt >= nblocks and inflight == 0:
                break
            h.poll(1000)
    except nbd.Error:
        pass
    fp.close()


def cmd_verify(uri, ackfile):
    h = nbd_handle(uri)
    acked = [int(x) for x in open(ackfile).read().split()]
    bad = [i for i in acked if h.pread(BLOCK, i * BLOCK) != block_data(i)]
    print("verify: %d acknowledged blocks, %d wrong" % (len(acked), len(bad)))
    if bad:
        print("verify: wrong blocks: %s" % bad[:20])
    sys.exit(1 if bad or not acked else 0)


def main():
    a = sys.argv[1:]
    if not a:
        raise SystemExit(__doc__)
    cmd = a[0]
    if cmd == "partial":
        cmd_partial(a[1], int(a[2]), int(a[3]))
    elif cmd == "vanish":
        cmd_vanish(a[1], int(a[2]), *(a[3:4] + [int(x) for x in a[4:5]]))
    elif cmd == "queued":
        cmd_queued(a[1], a[2], int(a[3]), int(a[4]),
                   float(a[5]) if len(a) > 5 else 0.3)
    elif cmd == "vanishers":
        cmd_vanishers(a[1], int(a[2]), int(a[3]), int(a[4]))
    elif cmd == "flood":
        cmd_flood(a[1], int(a[2]), int(a[3]), float(a[4]))
    elif cmd == "stats":
        cmd_stats(a[1], a[2], float(a[3]))
    elif cmd == "flushload":
        run_flushload(a[1], int(a[2]), int(a[3]), int(a[4]),
                      a[5] if len(a) > 5 else None)
    elif cmd == "ackwrite":
        cmd_ackwrite(a[1], a[2])
    elif cmd == "verify":
        cmd_verify(a[1], a[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
