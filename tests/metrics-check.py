#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The metrics of tests/test-metrics.sh, read with both of
prometheus_client's parsers (Debian's python3-prometheus-client): its
OpenMetrics parser, strict, which must read the text whole (each family
typed, once, the counters declared as OpenMetrics declares them, the
text ending in "# EOF"), and its Prometheus text format parser, which
must read the same samples (it reads the counters as untyped: the two
formats declare a counter's family differently).

  metrics-check.py live NBD_SOCKET CTL_SOCKET METRICS_FILE
      under a known load (N writes of known size to the default export
      and to two exports whose names need escaping, their connections
      kept open), check that the control command "metrics", throttle-ctl
      metrics and the metrics file parse, that every family is typed
      and named as the format wants (the same names whatever
      throttle-metric says, its unit in nbdkit_throttle_info), that
      each value is the one the
      JSON "stats" gives at the same moment (the load is over: nothing
      moves) and the one the load implies, and that the file is
      rewritten.  Prints "ok: ..." per check; exits 1 if one failed.

  metrics-check.py writeback NBD_SOCKET CTL_SOCKET
      in writeback mode, after N writes and a flush: the writeback
      families agree with the JSON stats' "writeback" member and with
      the writes.

  metrics-check.py swap CTL_SOCKET SAFE REASONS
      the swap verdict: the JSON stats' "swap" member says safe (SAFE
      yes or no) with exactly the reasons REASONS (comma-separated,
      "" for none), each with why, and the metrics say the same: the
      0/1 gauge, and one sample per reason of the fixed list, 1 for
      those in REASONS, 0 for the others.

  metrics-check.py final METRICS_FILE CHARGED
      after the server exited: the file holds its last numbers, the
      default export's charged bytes CHARGED and nothing in flight.

Run it with /usr/bin/python3 (the nbd and prometheus_client modules).
"""

import os
import socket
import subprocess
import sys
import time

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families)
from prometheus_client.parser import (
    text_string_to_metric_families as prometheus_families)

from throttle_control import Control, bad, check, ok
import throttle_control

PREFIX = "nbdkit_throttle_"
# Names that need each escape of a label value: a quote, a backslash,
# a newline; and a control character and a non-ASCII letter that need
# none.
NAMES = ["", 'we"ird\\name\x01\u00e9 x', "line\nbreak"]
WRITES = {"": 16, NAMES[1]: 8, NAMES[2]: 3}
SIZE = {"": 65536, NAMES[1]: 4096, NAMES[2]: 12288}

# The families of a budget's statistics: their JSON member, whether
# they count the metric's units (then their name ends in _units,
# whatever the metric), their type, whether the JSON's nanoseconds are
# seconds here, and whether the server-wide budget has them too.
BUDGET = [
    # name, json, units, counter, ns, server
    ("capacity", "capacity", True, False, False, True),
    ("in_flight", "in_flight", True, False, False, True),
    ("peak", "peak", True, False, False, True),
    ("charged", "charged", True, True, False, True),
    ("admitted_requests", "admitted", False, True, False, True),
    ("waited_requests", "waited", False, True, False, True),
    ("cancelled_waits", "cancelled", False, True, False, False),
    ("clamped_requests", "clamped", False, True, False, True),
    ("wait_seconds", "wait_ns_total", False, True, True, True),
    ("wait_max_seconds", "wait_ns_max", False, False, True, True),
    ("waiters", "waiters", False, False, False, True),
    ("connections", "connections", False, False, False, False),
]


def family_name(base, units, server=False):
    """The family's name as the parser gives it (a counter's without
    _total)."""
    return (PREFIX + ("server_" if server else "") + base +
            ("_units" if units else ""))


def read_metrics(ctl_sock):
    """The raw reply to "metrics", up to and with its "# EOF" line."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(ctl_sock)
    s.settimeout(throttle_control.TIMEOUT)
    s.sendall(b"metrics\n")
    buf = b""
    while not (buf.endswith(b"\n# EOF\n") or buf.startswith(b"{")):
        d = s.recv(65536)
        if not d:
            break
        buf += d
    s.close()
    return buf.decode()


def samples(families):
    """Every sample of families, comparable across the two parsers."""
    return sorted((s.name, tuple(sorted(s.labels.items())), float(s.value))
                  for f in families for s in f.samples)


def parse(text, what):
    """{family name: (type, [samples])} as the OpenMetrics parser reads
    the text, after checking that it reads it whole (each family typed,
    once) and that the Prometheus text parser reads the same samples."""
    fams = {}
    try:
        families = list(openmetrics_families(text))
    except ValueError as e:
        bad("%s: the OpenMetrics parser refuses it: %s" % (what, e))
        return fams
    for f in families:
        if f.name in fams:
            bad("%s: family %s appears twice (its samples are not "
                "together)" % (what, f.name))
        if f.type not in ("counter", "gauge"):
            bad("%s: family %s is %s: a sample with no TYPE line before it"
                % (what, f.name, f.type))
        fams[f.name] = (f.type, f.samples)
    check(text.endswith("\n# EOF\n"), "%s: ends with # EOF" % what)
    check(len(fams) > 20, "%s: %d families parsed" % (what, len(fams)))
    try:
        same = samples(prometheus_families(text)) == samples(families)
    except ValueError as e:
        bad("%s: the Prometheus text parser refuses it: %s" % (what, e))
        return fams
    check(same, "%s: the Prometheus text parser reads the same %d samples"
          % (what, len(samples(families))))
    return fams


def value(fams, name, export=None, what=""):
    """The value of family name's sample for export (None: the one
    sample without labels)."""
    typ, samples = fams.get(name, (None, []))
    want = {} if export is None else {"export": export}
    found = [s for s in samples if s.labels == want]
    if len(found) != 1:
        bad("%s: %s%s: %d samples" % (what, name, want, len(found)))
        return None
    if typ == "counter" and not found[0].name.endswith("_total"):
        bad("%s: counter sample %s without _total" % (what, found[0].name))
    return found[0].value


def compare(fams, stats, what):
    """Every value the JSON stats give, in the metrics."""
    unit = stats["metric"] if stats["metric"] in (
        "bytes", "pages", "requests") else "units"
    exports = {e["name"]: e for e in stats["exports"]}
    wrong = 0
    for base, member, units, counter, ns, server in BUDGET:
        name = family_name(base, units)
        typ = fams.get(name, (None,))[0]
        if typ != ("counter" if counter else "gauge"):
            bad("%s: %s is %s" % (what, name, typ))
            wrong += 1
        labelled = {s.labels.get("export") for s in fams.get(name, (0, []))[1]}
        if labelled != set(exports):
            bad("%s: %s has exports %r, stats %r"
                % (what, name, labelled, set(exports)))
            wrong += 1
        pairs = [(name, e, exports[e][member]) for e in exports]
        if server:
            pairs.append((family_name(base, units, True), None,
                          stats["server"][member]))
        for n, e, want in pairs:
            got = value(fams, n, e, what)
            if ns:
                want = want / 1e9
            if got != want:
                bad("%s: %s{export=%r} = %r, stats say %r"
                    % (what, n, e, got, want))
                wrong += 1
    for n, want in ((PREFIX + "exports", stats["exports_total"]),
                    (PREFIX + "default_capacity_units",
                     stats["default_capacity"])):
        if value(fams, n, None, what) != want:
            bad("%s: %s is not %r" % (what, n, want))
            wrong += 1
    info = fams.get(PREFIX + "info", (None, []))[1]
    if [s.labels for s in info] != [{"metric": stats["metric"],
                                     "unit": unit}]:
        bad("%s: info is %r" % (what, info))
        wrong += 1
    check(wrong == 0, "%s: every value is the JSON stats' (%d exports)"
          % (what, len(exports)))


def load(nbd_sock):
    """The known load: WRITES[name] writes of SIZE[name] bytes to each
    name, one after the other.  Returns the handles, kept open so that
    each name keeps its budget."""
    import nbd
    handles = []
    for name in NAMES:
        h = nbd.NBD()
        h.set_export_name(name)
        h.connect_unix(nbd_sock)
        for i in range(WRITES[name]):
            h.pwrite(bytes([65 + i % 26]) * SIZE[name], i * SIZE[name])
        handles.append(h)
    return handles


def file_state(path):
    """The file's inode and time: a rewrite is a new file, whose inode
    may be the last one's, freed by the rename."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def live(nbd_sock, ctl_sock, mfile):
    first = file_state(mfile)
    check(first is not None, "the metrics file exists at start")
    handles = load(nbd_sock)
    ctl = Control(ctl_sock)
    stats = ctl.ask("stats")
    text = read_metrics(ctl_sock)
    stats2 = ctl.ask("stats")
    check((stats["exports"], stats["server"]) ==
          (stats2["exports"], stats2["server"]),
          "nothing moved while the metrics were read")
    fams = parse(text, "metrics")
    compare(fams, stats, "metrics")

    # What the load implies, not only what the JSON says.
    total = 0
    for name in NAMES:
        want = WRITES[name] * SIZE[name]
        total += want
        check(value(fams, PREFIX + "charged_units", name) == want and
              value(fams, PREFIX + "admitted_requests", name) ==
              WRITES[name] and
              value(fams, PREFIX + "in_flight_units", name) == 0 and
              value(fams, PREFIX + "connections", name) == 1,
              "export %r: %d bytes charged in %d admissions, as written"
              % (name, want, WRITES[name]))
    # "" wrote first, alone: the server-wide bound could not bind then,
    # and nothing was charged to it until the second name opened
    # (nbdkit-throttle-filter(1), "One budget per export").
    server = total - WRITES[""] * SIZE[""]
    check(value(fams, PREFIX + "server_charged_units") == server,
          "the server-wide budget charged the %d bytes written once a "
          "second export was open" % server)
    # The escapes as the format writes them, not only as parsed back.
    for raw in ('export="we\\"ird\\\\name\x01\u00e9 x"',
                'export="line\\nbreak"'):
        check(('{%s} ' % raw) in text, "the label %s is escaped" % raw)

    # throttle-ctl prints the same text (nothing moved since).
    r = subprocess.run([os.environ["THROTTLE_CTL"], ctl_sock, "metrics"],
                       capture_output=True, timeout=30)
    check(r.returncode == 0 and r.stdout.decode() == text,
          "throttle-ctl metrics prints the reply as it is (exit %d)"
          % r.returncode)

    # The file: rewritten (a new file each time) with the numbers of now.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = file_state(mfile)
        if now is not None and now != first:
            try:
                with open(mfile) as f:
                    ftext = f.read()
            except FileNotFoundError:
                continue
            ffams = parse(ftext, "the metrics file")
            if value(ffams, PREFIX + "server_charged_units") == server:
                break
        time.sleep(0.1)
    else:
        bad("the metrics file was not rewritten with the load in 30 s")
        return
    ok("the metrics file was rewritten")
    compare(ffams, stats, "the metrics file")
    later = file_state(mfile)
    time.sleep(1)
    check(file_state(mfile) != later, "and keeps being rewritten")
    leftovers = [n for n in os.listdir(os.path.dirname(mfile))
                 if n.startswith("." + os.path.basename(mfile))]
    check(len(leftovers) <= 1, "no temporary files left beside it: %r"
          % leftovers)
    for h in handles:
        h.shutdown()
    ctl.close()


# The writeback families and their JSON members (the error as 0 or 1).
WRITEBACK = [
    ("pending_writes", "pending_writes", False),
    ("pending_bytes", "pending_bytes", False),
    ("peak_pending_bytes", "peak_pending_bytes", False),
    ("pool_used_bytes", "pool_used", False),
    ("pool_size_bytes", "pool_size", False),
    ("written_writes", "written", True),
    ("direct_writes", "direct", True),
    ("failed_writes", "failed", True),
    ("error_unreported", "error", False),
]


def writeback(nbd_sock, ctl_sock):
    import nbd
    n = 24
    h = nbd.NBD()
    h.connect_unix(nbd_sock)
    for i in range(n):
        h.pwrite(bytes([97 + i % 26]) * 4096, i * 4096)
    h.flush()
    stats = Control(ctl_sock).ask("stats")
    fams = parse(read_metrics(ctl_sock), "writeback metrics")
    compare(fams, stats, "writeback metrics")
    wb = stats["exports"][0]["writeback"]
    wrong = 0
    for base, member, counter in WRITEBACK:
        name = PREFIX + "writeback_" + base
        want = wb[member] if member != "error" else int(wb[member] is not None)
        if fams.get(name, (None,))[0] != ("counter" if counter else "gauge"):
            bad("%s is not a %s" % (name, "counter" if counter else "gauge"))
            wrong += 1
        if value(fams, name, "", "writeback") != want:
            bad("%s is %r, stats say %r"
                % (name, value(fams, name, "", "writeback"), want))
            wrong += 1
    check(wrong == 0, "the writeback families are the JSON's")
    got = (value(fams, PREFIX + "writeback_written_writes", "") +
           value(fams, PREFIX + "writeback_direct_writes", ""))
    check(got == n and
          value(fams, PREFIX + "writeback_pending_bytes", "") == 0,
          "%d of the %d writes written, none pending after the flush"
          % (got, n))
    h.shutdown()


def final(mfile, charged):
    with open(mfile) as f:
        fams = parse(f.read(), "the final metrics file")
    check(value(fams, PREFIX + "charged_units", "") == int(charged) and
          value(fams, PREFIX + "server_in_flight_units") == 0,
          "the metrics file holds the final numbers (%s bytes charged, "
          "nothing in flight)" % charged)


# The reasons of the swap verdict, a contract with every dashboard.
SWAP_REASONS = ["io-flusher", "rt", "oom", "mlock", "reserve",
                "min-free-kbytes", "watermark-boost"]


def swap(ctl_sock, safe, reasons):
    want_safe = safe == "yes"
    want = sorted(r for r in reasons.split(",") if r)
    sw = Control(ctl_sock).ask("stats").get("swap")
    if not check(isinstance(sw, dict), "stats has a \"swap\" object"):
        return
    check(sw.get("safe") is want_safe and
          sorted(sw.get("unsafe", {})) == want,
          "stats: safe %s, unsafe %r (want %s, %r)"
          % (sw.get("safe"), sw.get("unsafe"), safe, want))
    check(all(isinstance(v, str) and v for v in sw["unsafe"].values()),
          "stats: each reason says why")
    fams = parse(read_metrics(ctl_sock), "metrics")
    check(fams.get(PREFIX + "swap_safe", (None,))[0] == "gauge" and
          value(fams, PREFIX + "swap_safe", what="swap") == want_safe,
          "metrics: swap_safe %d" % want_safe)
    typ, samples = fams.get(PREFIX + "swap_unsafe", (None, []))
    got = {s.labels.get("reason"): s.value for s in samples}
    check(typ == "gauge" and
          got == {r: float(r in want) for r in SWAP_REASONS},
          "metrics: swap_unsafe %r" % got)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "live":
        live(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "swap":
        swap(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "writeback":
        writeback(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "final":
        final(*sys.argv[2:])
    else:
        sys.exit(__doc__)
    sys.exit(1 if throttle_control.failures else 0)


if __name__ == "__main__":
    main()
