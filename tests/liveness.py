#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Liveness of the throttle filter against real nbdkit: no capacity,
whoever sets it, strands a request.  Run by tests/test-liveness.sh.

  liveness.py target NBD_SOCKET CTL_SOCKET [set-capacity]
      eight clients each write 1M in a loop over a backend that takes
      200 ms per write, under a 1 ms latency target: the controller
      steps the capacity far down; the writes must keep being admitted
      for three rounds after that.  With set-capacity, then
      'set capacity "" 2M' must make both the ceiling and the budget's
      capacity 2M at once, and the writes keep flowing.

  liveness.py window NBD_SOCKET CTL_SOCKET GATE
      a latency target on: one write completes (a sample opens a
      window), then a write is held in flight by the test plugin until
      GATE is removed: the window must be judged on time, with no other
      completion to end it.

  liveness.py lower NBD_SOCKET CTL_SOCKET GATE
      capacity 1M, a 1M write held in flight by the test plugin (until
      GATE is removed), a second 1M write waiting: 'set capacity "" 64K',
      then the first is let go; the second, and a 4K write sent after,
      must complete.

Nothing here depends on the machine's speed: each step waits for a
state read from the control socket, and only a state that never comes
(LIMIT seconds, far beyond any slowness) is a failure, which prints the
last stats seen.  Run it with /usr/bin/python3 (the nbd module).
"""

import json
import os
import socket
import sys
import threading
import time

import nbd

# A hang becomes a failure after this long; a working filter reaches
# each state in well under a second, even under a sanitizer.
LIMIT = float(os.environ.get("LIVENESS_LIMIT", "60"))
MiB = 1048576


class Control:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(LIMIT)
        self.f = self.s.makefile("rwb")

    def ask(self, *lines):
        """Send the lines in one write; the replies, in order."""
        self.f.write(b"".join(line.encode() + b"\n" for line in lines))
        self.f.flush()
        out = []
        for _ in lines:
            r = self.f.readline()
            if not r:
                raise EOFError("control socket closed")
            out.append(json.loads(r))
        return out if len(out) > 1 else out[0]

    def stats(self):
        return self.ask('stats ""')["exports"][0]


def die(msg):
    """Fail now: daemon threads may be blocked in a write."""
    print("FAIL: " + msg, flush=True)
    os._exit(1)


def show(s):
    a = s.get("adapt", {})
    return ("capacity %d in_flight %d waiters %d admitted %d waited %d "
            "clamped %d steps_down %s steps_up %s ceiling %s"
            % (s["capacity"], s["in_flight"], s["waiters"], s["admitted"],
               s["waited"], s["clamped"], a.get("steps_down"),
               a.get("steps_up"), a.get("ceiling")))


def wait_for(ctl, what, cond):
    """Poll the stats until cond(stats) holds; fail after LIMIT s."""
    deadline = time.monotonic() + LIMIT
    while True:
        s = ctl.stats()
        if cond(s):
            print("ok: %s: %s" % (what, show(s)), flush=True)
            return s
        if time.monotonic() > deadline:
            die("%s: not within %g s; last stats: %s"
                % (what, LIMIT, show(s)))
        time.sleep(0.02)


class Writers:
    """n clients, each writing size bytes in a loop (one at a time)."""

    def __init__(self, sock, n, size):
        self.completed = [0] * n
        self.errors = []
        for i in range(n):
            threading.Thread(target=self.run, args=(sock, i, size),
                             daemon=True).start()

    def run(self, sock, i, size):
        try:
            h = nbd.NBD()
            h.connect_unix(sock)
            buf = bytes([i + 1]) * size
            while True:
                h.pwrite(buf, i * size)
                self.completed[i] += 1
        except Exception as e:   # shown, then the test fails
            self.errors.append("client %d: %s" % (i, e))


def target(nbd_sock, ctl_sock, set_capacity):
    ctl = Control(ctl_sock)
    w = Writers(nbd_sock, 8, MiB)
    # Four steps down take 1M below an eighth of itself: a part sized
    # when its request queued (at 1M) no longer fits.
    wait_for(ctl, "the controller stepped down 4 times",
             lambda s: s["adapt"]["steps_down"] >= 4)
    for r in range(3):
        a0 = ctl.stats()["admitted"]
        wait_for(ctl, "round %d: 16 more admissions" % (r + 1),
                 lambda s: s["admitted"] >= a0 + 16)
    if w.errors:
        die("; ".join(w.errors))

    if set_capacity:
        # Pipelined: nothing of the target's runs between the two.
        r, s = ctl.ask('set capacity "" 2M', 'stats ""')
        s = s["exports"][0]
        print("set capacity \"\" 2M -> %s; then %s" % (r, show(s)),
              flush=True)
        if not (r.get("ok") and r.get("capacity") == 2 * MiB):
            die("set capacity \"\" 2M refused: %s" % r)
        if s["adapt"]["ceiling"] != 2 * MiB:
            die("the ceiling is %d after set capacity 2M"
                     % s["adapt"]["ceiling"])
        if s["capacity"] != 2 * MiB:
            die("set capacity 2M with a target: the budget's "
                     "capacity is %d, not 2M at once" % s["capacity"])
        print("ok: set capacity 2M: ceiling and capacity 2M at once",
              flush=True)
        a0 = s["admitted"]
        wait_for(ctl, "16 more admissions after set capacity",
                 lambda s: s["admitted"] >= a0 + 16)
    if w.errors:
        die("; ".join(w.errors))
    print("ok: %d writes of 1M completed" % sum(w.completed), flush=True)


def window(nbd_sock, ctl_sock, gate):
    ctl = Control(ctl_sock)
    s = ctl.stats()
    if s["adapt"]["latency_target_ns"] is None or "window" in s["adapt"] \
       and s["adapt"]["window"] is not None:
        die("expected a target and no window judged yet: %s" % s)
    h = nbd.NBD()
    h.connect_unix(nbd_sock)
    h.pwrite(b"w" * 4096, 0)            # the window's one sample
    open(gate, "w").close()
    held = h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(4096)), 4096)
    wait_for(ctl, "the second write is held in flight",
             lambda s: s["in_flight"] == 4096)
    s = wait_for(ctl, "the window was judged with a write still held",
                 lambda s: s["adapt"].get("window") is not None)
    w = s["adapt"]["window"]
    if w["samples"] != 1 or s["in_flight"] != 4096:
        die("the window judged %d samples, in flight %d: %s"
            % (w["samples"], s["in_flight"], s))
    print("ok: window judged on time: %s" % w, flush=True)
    os.unlink(gate)
    while not h.aio_command_completed(held):
        h.poll(-1)
    h.shutdown()


def lower(nbd_sock, ctl_sock, gate):
    ctl = Control(ctl_sock)
    done = {}

    def write(name, size, off):
        def run():
            try:
                h = nbd.NBD()
                h.connect_unix(nbd_sock)
                h.pwrite(bytes([len(name)]) * size, off)
                done[name] = "ok"
                h.shutdown()
            except Exception as e:
                done[name] = str(e)
        threading.Thread(target=run, daemon=True).start()

    s = ctl.stats()
    if s["capacity"] != MiB:
        die("capacity %d, expected 1M" % s["capacity"])
    write("first", MiB, 0)
    wait_for(ctl, "the first 1M write is in flight",
             lambda s: s["in_flight"] == MiB)
    write("second", MiB, MiB)
    wait_for(ctl, "the second 1M write waits",
             lambda s: s["waiters"] == 1)
    r = ctl.ask('set capacity "" 64K')
    if not r.get("ok"):
        die("set capacity \"\" 64K: %s" % r)
    print("ok: set capacity \"\" 64K: %s" % r, flush=True)
    os.unlink(gate)
    wait_for(ctl, "the first write completed", lambda s: "first" in done)
    write("later", 4096, 2 * MiB)
    wait_for(ctl, "the second and the later write completed",
             lambda s: "second" in done and "later" in done)
    s = wait_for(ctl, "nothing in flight or waiting",
                 lambda s: s["in_flight"] == 0 and s["waiters"] == 0)
    bad = {k: v for k, v in done.items() if v != "ok"}
    if bad:
        die("writes failed: %s" % bad)
    if s["capacity"] != 65536:
        die("capacity %d, expected 64K" % s["capacity"])
    print("ok: every write completed under the lowered capacity", flush=True)


def main():
    a = sys.argv[1:]
    if len(a) in (3, 4) and a[0] == "target":
        target(a[1], a[2], len(a) == 4 and a[3] == "set-capacity")
    elif len(a) == 4 and a[0] == "window":
        window(a[1], a[2], a[3])
    elif len(a) == 4 and a[0] == "lower":
        lower(a[1], a[2], a[3])
    else:
        sys.exit(__doc__)
    # Daemon threads may still be in a write: do not wait for them.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
