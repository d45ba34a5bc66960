#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A full control socket still lets an operator in.  With all its places
# (MAX_CLIENTS, 32) held by clients that never send nor read, or by
# clients that sent commands and never read the replies (their output
# blocked), throttle-ctl's set capacity gets through at once, with an
# idle timeout of 600 s that cannot be what made room; the client
# closed for it is the one idle longest (the oldest last byte read from
# it or written to it), told so in an error line where no reply of its
# own is pending; the others stay.  Nothing here is timed: every wait
# is bounded and generous.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
: "${THROTTLE_CTL:?THROTTLE_CTL must point to the built throttle-ctl}"
requires_file "$THROTTLE_FILTER"
requires_file "$THROTTLE_CTL"
requires $PY -c 'import nbd'

# Each export held open adds its counters and its 400-byte name to a
# stats reply: the replies to one read of commands are then more than
# a socket holds (see "blocked" below).
names=$(for i in $(seq 8); do printf 'e%d-%0400d ' "$i" 0; done)
start_nbdkit full --filter="$THROTTLE_FILTER" memory 1M \
  throttle-control="$tmp/ctl" -D throttle.control_timeout=600
hold_exports "$tmp/full.sock" full $names

$PY - "$tmp/ctl" "$THROTTLE_CTL" <<'EOF' || fail "see above"
import fcntl, select, struct, subprocess, sys, termios
from throttle_control import Control, EVICTED

ctl_sock, ctl_tool = sys.argv[1], sys.argv[2]
MAX_CLIENTS = 32            # throttle-control.c
WAIT = 60                   # every wait: bounded, and generous
failures = 0


def check(cond, msg):
    global failures
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures += 1


def operator(size, n):
    """throttle-ctl set capacity, as an operator runs it.  Without
    room it fails (the old "too many control clients"), or waits for
    the idle timeout (600 s) past its own (WAIT): the rest is moot."""
    r = subprocess.run([ctl_tool, "--timeout", str(WAIT), ctl_sock,
                        "set", "capacity", "", size],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=2 * WAIT)
    out = r.stdout.decode(errors="replace").strip()
    check(r.returncode == 0 and ("capacity %d " % n) in out,
          "with the socket full, set capacity \"\" %s: exit %d: %s"
          % (size, r.returncode, out))
    if failures:
        sys.exit(1)


def closed(c, secs):
    """Whether the server closes c within secs, read or not."""
    p = select.poll()
    p.register(c.s, select.POLLRDHUP)
    return bool(p.poll(secs * 1000))


def untouched(c):
    """Open, and nothing sent to it since it last read."""
    p = select.poll()
    p.register(c.s, select.POLLIN | select.POLLRDHUP)
    return not c.buf and not p.poll(0)


def rest(c):
    """All the server sent, up to its close (a reset too), bounded."""
    c.s.settimeout(WAIT)
    return c._rest()


def queued(c):
    return struct.unpack("i", fcntl.ioctl(c.s, termios.FIONREAD,
                                          b"\0\0\0\0"))[0]


# --- clients that never send nor read --------------------------------
cs = [Control(ctl_sock) for _ in range(MAX_CLIENTS)]
# The server accepts in the order of connect: a reply to the last one
# means every one is in.  Then the first one is the most recently
# active: the longest idle is the second.
cs[-1].ask("help")
cs[0].ask("help")
operator("2M", 2097152)
check(closed(cs[1], WAIT), "the client idle longest (the second "
      "connected) is closed")
got = rest(cs[1])
check(got == EVICTED + b"\n", "and told why: %r" % got[:200])
check(all(untouched(c) for c in cs[2:]),
      "the %d others stay, untouched" % (len(cs) - 2))
r = cs[0].ask('stats ""')
check(r["exports"][0]["capacity"] == 2097152,
      "the first connected, active since, is served: capacity %d"
      % r["exports"][0]["capacity"])
# Full again with a newcomer: the next idle longest goes, the third
# connected, not the newcomer nor the first.
new = Control(ctl_sock)
operator("3M", 3145728)
check(closed(cs[2], WAIT) and rest(cs[2]) == EVICTED + b"\n",
      "full again: the third connected is closed, idle longest now")
check(untouched(new) and all(untouched(c) for c in cs[3:]),
      "the newcomer and the others stay")
check(cs[0].ask("help").get("commands") is not None,
      "the first connected is still served")
for c in cs + [new]:
    c.close()

# --- clients whose replies are blocked: they sent commands and never
# read a reply.  Each sends k commands in one write of at most 1025
# bytes, which the server reads at once; their replies are more than
# its socket can take (k * size over 3 times the default socket send
# buffer: a Unix socket takes at most about 1.5 times that), so in the
# same turn of its loop it sends what fits, stops reading from the
# client, and then makes no progress with it: that turn is the
# client's last activity.  Its first reply bytes show that this turn
# has come, before the next client connects.
c = Control(ctl_sock)
c.send(b"stats\n")
size = len(c.readline()) + 1
c.close()
try:
    with open("/proc/sys/net/core/wmem_default") as f:
        wmem = int(f.read())
except OSError:
    wmem = 212992
k = min(170, -(-3 * wmem // size))
if k * size < 3 * wmem:
    sys.exit("FAIL: stats replies of %d bytes are too small to block" % size)
blocked = []
for i in range(MAX_CLIENTS):
    c = Control(ctl_sock)
    c.send(b"stats\n" * k)
    if not select.select([c.s], [], [], WAIT)[0]:
        sys.exit("FAIL: no reply to blocked client %d in %d s" % (i, WAIT))
    blocked.append(c)
operator("4M", 4194304)
check(closed(blocked[0], WAIT),
      "the blocked client idle longest (the first) is closed")
check(all(not closed(c, 0) and queued(c) < k * size for c in blocked[1:]),
      "the %d others stay, their replies blocked" % (len(blocked) - 1))
got = rest(blocked[0])
check(len(got) < k * size and b"closed:" not in got,
      "the closed one had %d of its %d bytes of replies, and no error "
      "line cut into them" % (len(got), k * size))
# Full again with a newcomer: the next blocked one goes.
new = Control(ctl_sock)
operator("5M", 5242880)
check(closed(blocked[1], WAIT), "full again: the second blocked one is closed")
check(untouched(new) and all(not closed(c, 0) for c in blocked[2:]),
      "the newcomer and the other blocked ones stay")
sys.exit(1 if failures else 0)
EOF

kill $held; wait $held 2>/dev/null || :
stop_nbdkit $pid
echo PASS
