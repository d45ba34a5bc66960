#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The throttle filter's control socket, for tests and operators.

A module (import throttle_control: functions.sh puts tests/ on
PYTHONPATH) and a command line:

  throttle_control.py send CTL_SOCKET LINE...
      send each line, print each reply (one line each)

  throttle_control.py odd-name
      print the export name with quotes, a backslash, a control
      character and a non-ASCII letter that the live test expects the
      plugin to list

  throttle_control.py hold NBD_SOCKET READY_FILE NAME...
      open one connection per NAME (each writes 4K at offset 0), then
      write READY_FILE and keep them open until killed: a budget other
      than the default one exists only while a connection to its name
      is open

  throttle_control.py live NBD_SOCKET CTL_SOCKET
      the test of tests/test-control.sh: drive the control socket while
      several connections keep writes queued, and check that the stats
      agree with what the clients did, that a capacity change takes
      effect, and that bad input leaves the server serving.  Prints
      "ok: ..." per check and "total_writes=N" at the end; exits 1 if a
      check failed.

Run it with /usr/bin/python3: the live test needs the nbd module.
"""

import json
import socket
import sys
import threading
import time

TIMEOUT = 10          # no single exchange may take longer than this
ODD_NAME = 'we"ird\\name\x01\u00e9 x'
failures = 0


def ok(msg):
    print("ok: " + msg, flush=True)


def bad(msg):
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)


def check(cond, msg):
    (ok if cond else bad)(msg)
    return cond


IDLE_CLOSE = b'{"error":"idle for too long: closing"}'
EVICTED = (b'{"error":"closed: the control socket is full and this client '
           b'was idle longest"}')
# The lines with which the server closes a client without reading more
# from it.
CLOSED_UNREAD = (IDLE_CLOSE, EVICTED)


class Control:
    """A connection to the control socket.

    The server closes a connection idle for its timeout (30 s, or
    -D throttle.control_timeout), saying so in one line; on a slow
    machine any gap between two commands may be that long.  It also
    closes the connection idle longest, with another line, to make
    room for a new one when all 32 places are taken.  ask() therefore
    reconnects and sends its command again when, and only when, the
    server has closed the connection with exactly one of those lines:
    the command was then never read (the server drops such a client
    without reading from it, and sends the line only when every reply
    is sent), so sending it again runs it once.  Any
    other close or unexpected line is an error, as before.  send() and
    readline() stay raw, for the tests of the protocol itself.
    """

    def __init__(self, path):
        self.path = path
        self.idle_reconnects = 0
        self._connect()

    def _connect(self):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Blocking: a Unix socket with a full backlog makes a connect
        # with a timeout fail at once with EAGAIN instead of waiting.
        self.s.connect(self.path)
        self.s.settimeout(TIMEOUT)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def readline(self):
        """A reply line, or None at EOF."""
        while b"\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                return None
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _rest(self):
        """Everything the server still sends, up to its close (a reset
        too: it is how a close with our command unread shows)."""
        rest, self.buf = self.buf, b""
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return rest
                rest += d
        except ConnectionResetError:
            return rest

    def _idle_reconnect(self, got, line):
        """The server sent 'got' and closed: reconnect if that was the
        idle close or an eviction, else fail."""
        if got not in [closing + b"\n" for closing in CLOSED_UNREAD]:
            raise EOFError("control socket closed after %r, having sent %r"
                           % (line, got[:80]))
        self.s.close()
        self.idle_reconnects += 1
        self._connect()

    def _unasked(self):
        """Before a command: what the server sent unasked (b"" if
        nothing; then the connection is open)."""
        if self.buf:
            return self._rest()
        self.s.setblocking(False)
        try:
            d = self.s.recv(65536)
        except BlockingIOError:
            return b""
        except ConnectionResetError:
            d = b""
        finally:
            self.s.settimeout(TIMEOUT)
        if not d:
            return b"(EOF)"
        self.buf = d
        return self._rest()

    def ask(self, line):
        if isinstance(line, str):
            line = line.encode()
        got = self._unasked()
        if got:
            self._idle_reconnect(got, b"(before) " + line)
        for attempt in (1, 2):
            try:
                self.send(line + b"\n")
                r = self.readline()
            except (BrokenPipeError, ConnectionResetError):
                r = None              # closed before our command was read
            if r is not None and r not in CLOSED_UNREAD:
                return json.loads(r)
            if attempt == 2:
                break
            got = (r + b"\n" if r is not None else b"") + self._rest()
            self._idle_reconnect(got, line)
        raise EOFError("control socket closed after %r" % line)

    def eof(self):
        """True if the server closes the connection (after any replies)."""
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
                self.buf += d
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.s.close()


def export_stats(ctl, name=""):
    r = ctl.ask("stats " + json.dumps(name))
    return r["exports"][0]


def pipeline(h, byte, n):
    """On the libnbd handle h, n writes of 64K of byte, all sent before
    waiting for any (so that they queue in the filter at once)."""
    import nbd
    buf = nbd.Buffer.from_bytearray(bytearray(byte * 65536))
    left = [n]

    def done(err):
        left[0] -= 1
        return 0
    for i in range(n):
        h.aio_pwrite(buf, i * 65536, completion=done)
    while left[0] > 0:
        h.poll(-1)


class Load:
    """conns connections, each keeping depth writes of size queued."""

    running = []

    def __init__(self, nbd_sock, conns=4, depth=16, size=65536, export=""):
        import nbd
        self.nbd = nbd
        self.sock, self.depth, self.size = nbd_sock, depth, size
        self.export = export
        self.stop = threading.Event()
        self.completed = [0] * conns
        self.errors = [0] * conns
        self.threads = [threading.Thread(target=self.run, args=(i,),
                                         daemon=True)
                        for i in range(conns)]
        Load.running.append(self)
        for t in self.threads:
            t.start()

    def run(self, idx):
        nbd = self.nbd
        h = nbd.NBD()
        h.set_export_name(self.export)
        h.connect_unix(self.sock)
        buf = nbd.Buffer.from_bytearray(bytearray([idx + 1]) * self.size)
        inflight = 0
        sent = 0

        def done(err):
            nonlocal inflight
            inflight -= 1
            if err.value != 0:
                self.errors[idx] += 1
                err.value = 0
            else:
                self.completed[idx] += 1
            return 1

        while not self.stop.is_set() or inflight > 0:
            while not self.stop.is_set() and inflight < self.depth:
                off = ((idx * 1000 + sent) % 2000) * self.size
                h.aio_pwrite(buf, off, completion=done)
                inflight += 1
                sent += 1
            h.poll(100)
        h.shutdown()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
        return sum(self.completed), sum(self.errors)


def sample(ctl, n, interval):
    out = []
    for _ in range(n):
        out.append(export_stats(ctl))
        time.sleep(interval)
    return out


def live(nbd_sock, ctl_sock):
    try:
        live_checks(nbd_sock, ctl_sock)
    finally:
        # Stop the writers whatever failed.
        for load in Load.running:
            load.stop.set()


def live_checks(nbd_sock, ctl_sock):
    import nbd
    ctl = Control(ctl_sock)

    # Before any client: the default export's budget is there, at the
    # configured capacity; a name no connection has open has none.
    r = ctl.ask("stats")
    check(r.get("default_capacity") == 1048576 and
          [e["name"] for e in r["exports"]] == [""] and
          r["exports"][0]["capacity"] == 1048576,
          "stats before any client show the default budget: %s" % r)
    r = ctl.ask('set capacity "" 1M')
    check(r.get("ok") is True and r.get("previous") == 1048576,
          "set capacity of the default export before any client: %s" % r)
    r = ctl.ask('set capacity nosuch 1M')
    check("error" in r and "unknown export" in r["error"],
          "set capacity of a name with no connection: %s" % r)

    load = Load(nbd_sock)
    time.sleep(1)

    # --- the configured capacity (1M) holds under a demand of 4M
    s = sample(ctl, 20, 0.05)
    cap = s[0]["capacity"]
    check(cap == 1048576, "configured capacity reported: %d" % cap)
    mx = max(x["in_flight"] for x in s)
    check(0 < mx <= cap, "in_flight <= 1M under load (max sampled %d)" % mx)
    check(s[-1]["peak"] <= cap, "peak <= 1M (%d)" % s[-1]["peak"])
    check(max(x["waiters"] for x in s) > 0,
          "requests wait for credit (max waiters %d)"
          % max(x["waiters"] for x in s))
    check(s[-1]["admitted"] > s[0]["admitted"],
          "admitted grows (%d -> %d)" % (s[0]["admitted"], s[-1]["admitted"]))

    # --- bad input while the load runs; none of it may stall anything
    bad_input(ctl, ctl_sock, nbd_sock)
    # That may have taken longer than the idle timeout (2 s here): ask
    # then reconnects after the server's idle close.
    r = ctl.ask('stats ""')["exports"][0]
    check(r["capacity"] == 1048576,
          "capacity unchanged by all the bad input (%d)" % r["capacity"])

    # --- lower to 256K: new requests obey it once old credit is returned
    before = export_stats(ctl)
    r = ctl.ask('set capacity "" 256K')
    after = export_stats(ctl)
    check(r.get("ok") is True and r.get("capacity") == 262144 and
          r.get("previous") == 1048576, "set capacity \"\" 256K: %s" % r)
    print("note: in_flight %d before lowering, %d just after (credit held "
          "is not revoked)" % (before["in_flight"], after["in_flight"]),
          flush=True)
    time.sleep(0.5)          # the backend takes 50 ms per write
    s = sample(ctl, 30, 0.03)
    mx = max(x["in_flight"] for x in s)
    check(all(x["capacity"] == 262144 for x in s), "stats show capacity 256K")
    check(0 < mx <= 262144,
          "after lowering, in_flight <= 256K (max sampled %d)" % mx)
    w = max(x["waiters"] for x in s)
    check(w >= 2, "at 256K, requests queue (max waiters %d)" % w)

    # --- raise to 64M: the waiters are admitted at once, by set itself
    s0 = export_stats(ctl)
    r = ctl.ask('set capacity "" 64M')
    s1 = export_stats(ctl)
    check(r.get("ok") is True and r.get("previous") == 262144,
          "set capacity \"\" 64M: %s" % r)
    check(s0["waiters"] > 0 and s1["waiters"] == 0,
          "raising wakes every waiter at once (waiters %d -> %d)"
          % (s0["waiters"], s1["waiters"]))
    check(s1["in_flight"] > 262144,
          "raising admits more than the old capacity at once "
          "(in_flight %d -> %d)" % (s0["in_flight"], s1["in_flight"]))
    time.sleep(0.5)
    s = sample(ctl, 10, 0.03)
    mx = max(x["in_flight"] for x in s)
    check(mx > 1048576, "at 64M the demand of 4M mostly flows (max in_flight "
          "%d)" % mx)

    # --- the end: stats agree with what the clients did
    total, errors = load.finish()
    check(errors == 0, "no write failed (%d)" % errors)
    s = export_stats(ctl)
    check(s["admitted"] == total,
          "admitted %d == writes completed by the clients %d"
          % (s["admitted"], total))
    check(s["charged"] == total * 65536,
          "charged %d == %d writes x 64K" % (s["charged"], total))
    check(s["in_flight"] == 0 and s["waiters"] == 0,
          "nothing left in flight or waiting (%d, %d)"
          % (s["in_flight"], s["waiters"]))
    check(s["waited"] > 0 and s["wait_ns_max"] > 0 and
          s["wait_ns_total"] >= s["wait_ns_max"],
          "waits were counted (waited %d, max %d ns, total %d ns)"
          % (s["waited"], s["wait_ns_max"], s["wait_ns_total"]))
    check(s["peak"] > 1048576, "peak reflects the 64M phase (%d)" % s["peak"])

    # --- export names are escaped, and a name has its own budget while
    # connected (test-control.sh lists this name with the test plugin's
    # export=, so that the listing's escapes are checked too).
    name = ODD_NAME
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_unix(nbd_sock)
    listed = []
    h.opt_list(lambda n, d: listed.append(n) or 0)
    h.opt_abort()
    check(name in listed, "the plugin lists the odd name: %r" % listed)
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(nbd_sock)
    h.pwrite(b"z" * 4096, 0)
    allst = ctl.ask("stats")
    names = {e["name"]: e for e in allst["exports"]}
    check(name in names and names[name]["admitted"] == 1 and
          names[name]["charged"] == 4096,
          "an odd export name round-trips through JSON: %r" % list(names))
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    r = ctl.ask("set capacity " + quoted + " 128K")
    check(r.get("ok") is True and r.get("export") == name and
          r.get("capacity") == 131072, "set capacity of the odd export: %s" % r)
    check(export_stats(ctl, "")["capacity"] == 67108864,
          "the default export's capacity is its own (64M)")
    r = ctl.ask("stats " + quoted)
    check(len(r["exports"]) == 1 and r["exports"][0]["capacity"] == 131072,
          "stats of one export by quoted name")
    h.shutdown()

    # The server still serves data and commands.
    h = nbd.NBD()
    h.connect_unix(nbd_sock)
    h.pwrite(b"y" * 65536, 0)
    h.shutdown()
    check(export_stats(ctl)["admitted"] == total + 1,
          "a write after everything is admitted and counted")
    print("note: the command client was closed for idleness %d times"
          % ctl.idle_reconnects, flush=True)
    ctl.close()
    # Every write to every export: the load's, the odd export's, the last.
    print("total_writes=%d" % (total + 2), flush=True)


def timed_ask(ctl_sock, line, limit=2.0):
    """Ask on a fresh connection; the reply must come within limit s."""
    t = time.monotonic()
    c = Control(ctl_sock)
    r = c.ask(line)
    c.close()
    return r, time.monotonic() - t


def bad_input(ctl, ctl_sock, nbd_sock):
    cases = [
        (b"garbage", "unknown command"),
        (b"\x00\xff\x01junk", "NUL byte"),
        (b"stats \"unterminated", "unterminated"),
        (b"stats nosuch", "unknown export"),
    (b"stats a b", "usage"),
        (b"set capacity nosuch 1M", "unknown export"),
        (b'set capacity "" abc', "bad number"),
        (b'set capacity "" -5', "bad number"),
        (b'set capacity "" 0', "bad number"),
        (b'set capacity "" 1.5.6', "bad number"),
        (b'set capacity "" 99999999999999999999', "bad number"),
        (b"set capacity", "usage"),
        (b"set limit x 1", "usage"),
        (b"help me", "usage"),
        (b"stats a b c d e f", "too many arguments"),
    ]
    for line, want in cases:
        r = ctl.ask(line)
        check("error" in r and want in r["error"],
              "%r gets an error reply (%s)" % (line, r.get("error", r)))
    r = ctl.ask("help")
    check("stats [EXPORT]" in r.get("commands", []),
          "the same connection still answers help")

    # Several commands in one write, blank lines ignored, CRLF accepted.
    c = Control(ctl_sock)
    c.send(b"help\r\n\n  \nstats\nbogus\n")
    replies = [json.loads(c.readline()) for _ in range(3)]
    check("commands" in replies[0] and "exports" in replies[1] and
          "error" in replies[2], "pipelined commands answered in order")
    c.close()

    # An overlong line: an error, then the server closes.
    for data in (b"x" * 5000, b"stats " + b"y" * 2000 + b"\n"):
        c = Control(ctl_sock)
        c.send(data)
        r = c.readline()
        check(r is not None and b"line too long" in r,
              "overlong line (%d bytes) gets an error: %s" % (len(data), r))
        check(c.eof(), "and the connection is closed")
        c.close()
    # A line of exactly 1024 bytes is still a line.
    c = Control(ctl_sock)
    r = c.ask(b"stats " + b"z" * 1018)
    check("unknown export" in r.get("error", ""),
          "a 1024-byte line is accepted as a command")
    c.close()

    # A client that vanishes mid-line: its half command is not run.
    c = Control(ctl_sock)
    c.send(b'set capacity "" 1')
    c.close()
    # A client that connects and sends nothing, and one that floods
    # commands without reading the replies.
    silent = Control(ctl_sock)
    flood = Control(ctl_sock)
    flood.s.setblocking(False)
    flooded = 0
    try:
        for _ in range(10000):
            flooded += flood.s.send(b"stats\n" * 1000)
    except BlockingIOError:
        pass
    check(flooded > 100000,
          "a client that does not read filled its socket (%d bytes sent)"
          % flooded)
    # Meanwhile the others are served promptly and data still flows.
    r, dt = timed_ask(ctl_sock, "stats")
    check("exports" in r and dt < 1.0,
          "stats answered in %.3f s while a silent and a flooding client "
          "are connected" % dt)
    a0 = export_stats(ctl)["admitted"]
    time.sleep(0.5)
    a1 = export_stats(ctl)["admitted"]
    check(a1 > a0, "writes are still admitted meanwhile (%d -> %d)" % (a0, a1))
    # Idle clients are dropped (-D throttle.control_timeout=2).
    silent.s.settimeout(6)
    t = time.monotonic()
    gone = silent.eof()
    check(gone, "a silent client is dropped after %.1f s" %
          (time.monotonic() - t))
    check(b"idle" in silent.buf, "with an idle error: %r" % silent.buf[:80])
    silent.close()
    flood.s.setblocking(True)
    flood.s.settimeout(6)
    check(flood.eof(), "a client that never reads its replies is dropped")
    flood.close()

    # More clients than places at once: each one beyond 32 closes the
    # one idle longest (the command client, if its idle timeout has not
    # already closed it, then the first of these): the first 8 are told
    # so.  (The others are closed for idleness, 2 s here, soon after;
    # test-control-full.sh, with no idle timeout to race, checks which
    # client goes in full.)
    conns = [Control(ctl_sock) for _ in range(40)]
    evicted = []
    for i, c in enumerate(conns[:8]):
        c.s.settimeout(TIMEOUT)
        try:
            if c.readline() == EVICTED:
                evicted.append(i)
        except socket.timeout:
            pass
    check(evicted == list(range(8)), "40 clients at once: the first 8 "
          "make room for the last 8 (%s told so)" % evicted)
    for c in conns:
        c.close()
    r, dt = timed_ask(ctl_sock, "help")
    check("commands" in r, "served again once they have gone")


def hold(nbd_sock, ready, names):
    import os
    import nbd
    handles = []
    for name in names:
        h = nbd.NBD()
        h.set_export_name(name)
        h.connect_unix(nbd_sock)
        h.pwrite(b"h" * 4096, 0)
        handles.append(h)
    with open(ready + ".tmp", "w") as f:
        f.write("%d\n" % len(handles))
    os.rename(ready + ".tmp", ready)
    while True:
        time.sleep(3600)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "send":
        c = Control(sys.argv[2])
        for line in sys.argv[3:]:
            c.send(line.encode() + b"\n")
            r = c.readline()
            if r is None:
                print("(closed)")
                sys.exit(1)
            print(r.decode(errors="replace"))
        c.close()
        return
    if len(sys.argv) == 2 and sys.argv[1] == "odd-name":
        sys.stdout.buffer.write(ODD_NAME.encode())
        return
    if len(sys.argv) >= 5 and sys.argv[1] == "hold":
        hold(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "live":
        live(sys.argv[2], sys.argv[3])
        sys.exit(1 if failures else 0)
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
