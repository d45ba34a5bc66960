#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Poll the throttle's control socket every PERIOD seconds (default
0.05) until killed.

usage: capacity-poll.py CONTROL-SOCKET OUT [PERIOD]

Creates OUT once connected, then writes one line per look: seconds
since OUT was created, the default export's capacity (the effective
capacity under a latency target), the units charged so far, the units
in flight and the requests waiting for units.  The
caller starts its load when OUT exists, so that time 0 is the load's
start, whatever Python took to start.  Waits up to 5 s for the socket;
writes nothing until a client has opened the export.  Standard library
only.
"""

import json
import signal
import socket
import sys
import time

path, out = sys.argv[1:3]
period = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

start = time.monotonic()
s = None
while s is None:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
    except OSError:
        s = None
        if time.monotonic() - start > 5:
            sys.exit("capacity-poll: cannot connect to %s" % path)
        time.sleep(0.02)
f = s.makefile("rwb")

with open(out, "w", buffering=1) as o:
    start = time.monotonic()
    while True:
        f.write(b'stats ""\n')
        f.flush()
        line = f.readline()
        if not line:
            break
        r = json.loads(line)
        if "exports" in r and r["exports"]:
            e = r["exports"][0]
            o.write("%.4f %d %d %d %d\n" % (time.monotonic() - start,
                                            e["capacity"], e["charged"],
                                            e["in_flight"], e["waiters"]))
        time.sleep(period)
