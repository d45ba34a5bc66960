#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Turn the results of bench.sh into BENCHMARKS.md (on stdout) and the
gnuplot data of the plots: plotcmd.gp for latency.gp (case 4) and
plotcmd-mixed.gp with mixed-*.cdf for mixed-cdf.gp (case 2m), each
only when its case ran.

usage: summarize.py INDEX.tsv MACHINE.md RESULTS-DIR

Ratios are computed within each round (configurations of one round ran
next to each other) and the median over rounds is reported, with the
range over rounds so noise shows.
"""

import json
import os
import statistics
import sys

MiB = 1048576.0

index_path, machine_path, res_dir = sys.argv[1:4]


class Run:
    pass


class FioJob:
    """One job section of a fio run: its entries in jobs[] merged (one
    entry per reporting group with group_reporting, else one per job)."""

    def __init__(self):
        self.bw = 0.0           # B/s, summed over the entries
        self.ios = 0
        self.lat_max = 0.0      # us, submission to completion
        self.p99s = []          # us, completion latency, per entry
        self.bins = {}          # completion latency (ns) -> count

    def p99(self):
        """p99 of the completion latency in us: fio's own for a single
        entry, else from the merged histograms (json+)."""
        if len(self.p99s) == 1 or not self.bins:
            return max(self.p99s)
        return percentile(self.bins, 99.0) / 1000.0


def percentile(bins, pct):
    total = sum(bins.values())
    seen = 0
    for lat in sorted(bins):
        seen += bins[lat]
        if seen >= total * pct / 100.0:
            return lat
    return max(bins)


def fio_jobs(j):
    """jobname -> FioJob from fio's JSON (json or json+)."""
    jobs = {}
    for e in j["jobs"]:
        w = e["write"]
        b = jobs.setdefault(e["jobname"], FioJob())
        b.bw += float(w["bw_bytes"])
        b.ios += w.get("total_ios", 0)
        b.lat_max = max(b.lat_max, w["lat_ns"]["max"] / 1000.0)
        b.p99s.append(w["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1000.0)
        for k, v in w["clat_ns"].get("bins", {}).items():
            b.bins[int(k)] = b.bins.get(int(k), 0) + v
    return jobs


def load_result(tool, path):
    """Throughput (B/s), IOPS and latencies (us) from a client's JSON."""
    with open(path) as f:
        j = json.load(f)
    r = Run()
    if tool == "load":
        if j["status"] != "ok":
            raise SystemExit("%s: run failed: %s" % (path, j.get("error")))
        r.bw = j["throughput_bytes_per_second"]
        r.iops = j["iops"]
        lat = j["latency_us"]
        r.p50, r.p99, r.p999, r.max = lat["p50"], lat["p99"], lat["p99.9"], lat["max"]
        r.fairness = j["fairness"]
        r.largest = j["largest_size_bytes"]
        r.largest_max = j["largest_size_max_latency_us"]
        r.by_size = {s["size_bytes"]: s["latency_us"] for s in j["by_size"]}
    else:
        r.jobs = fio_jobs(j)
        w = j["jobs"][0]["write"]
        r.bw = sum(b.bw for b in r.jobs.values())
        r.iops = w["iops"]
        clat = w["clat_ns"]
        pct = clat.get("percentile", {})
        r.p50 = pct.get("50.000000", 0) / 1000.0
        r.p99 = pct.get("99.000000", 0) / 1000.0
        r.p999 = pct.get("99.900000", 0) / 1000.0
        r.max = clat["max"] / 1000.0
        r.fairness = None
    return r


runs = {}        # (case, workload, config, tool) -> {round: Run}
unavailable = set()
with open(index_path) as f:
    for line in f:
        case, wl, config, rnd, tool, path, rss, state = line.rstrip("\n").split("\t")
        if path == "unavailable":
            unavailable.add((case, wl, config))
            continue
        r = load_result(tool, path)
        r.rss_kib = int(rss)
        r.cdf = path[:-5] + ".cdf"
        r.path = path
        r.state = {}
        if state != "-":
            with open(state) as sf:
                for kv in sf:
                    k, _, v = kv.strip().partition("=")
                    r.state[k] = int(v)
        runs.setdefault((case, wl, config, tool), {})[int(rnd)] = r


def rounds(case, wl, config, tool="load"):
    return runs.get((case, wl, config, tool), {})


def med(case, wl, config, attr, tool="load"):
    v = [getattr(r, attr) for r in rounds(case, wl, config, tool).values()]
    return statistics.median(v) if v else None


def ratio_values(values):
    """Median, range and count of per-round values, or None."""
    v = list(values)
    if not v:
        return None
    return statistics.median(v), min(v), max(v), len(v)


def ratio(case, wl, num, den, attr="bw", tool="load"):
    """Median, range and number of rounds of num/den, paired by round."""
    a, b = rounds(case, wl, num, tool), rounds(case, wl, den, tool)
    return ratio_values(getattr(a[k], attr) / getattr(b[k], attr)
                        for k in a if k in b and getattr(b[k], attr))


def fmt_ratio(r):
    if r is None:
        return "n/a"
    return "%.3f (%.3f-%.3f, %d round%s)" % (r + ("" if r[3] == 1 else "s",))


def fmt_spread(values, f):
    """Median (range) of per-round values, each formatted by f."""
    v = list(values)
    if not v:
        return "n/a"
    if len(v) == 1:
        return f(v[0])
    return "%s (%s-%s)" % (f(statistics.median(v)), f(min(v)), f(max(v)))


def mib(x):
    return "n/a" if x is None else "%.1f" % (x / MiB)


def us(x):
    if x is None:
        return "n/a"
    return "%.0f" % x if x >= 100 else "%.1f" % x


def ms(x):
    return "n/a" if x is None else "%.1f" % (x / 1000.0)


def config_name(c):
    if c == "none":
        return "no filter"
    if c.startswith("throttle:"):
        c, _, extra = c.partition("+")
        parts = c.split(":")
        if extra:
            parts[-1] += " " + extra.replace("+", " ")
        s = "throttle capacity=%s" % parts[1]
        if len(parts) > 2:
            s += " " + parts[2]
        return s
    if c.startswith("rate:"):
        return "rate filter rate=%s" % c.split(":")[1]
    return c


out = []
p = out.append


def header():
    """Title, how to read the numbers, and the machine."""
    p("# Benchmarks")
    p("")
    p("Written by `make bench` (`bench/bench.sh`); do not edit by hand.  Every")
    p("number in cases 1 to 5 was measured in the run described here (the")
    p("last section keeps what the tests measured).  Configurations")
    p("alternate within each round; a ratio is taken within a round and the")
    p("median over rounds is shown with the range in parentheses.  Latencies")
    p("are from `throttle-load` (request handed to libnbd to reply read) or")
    p("fio's completion latency, in microseconds unless marked ms.")
    p("Every ratio is given as median (lowest-highest, number of rounds).")
    p("The ranges are run-to-run noise.  Other work on the machine is the")
    p("main source of it, so `bench.sh` first samples the machine's idle")
    p("state (1-minute load average, and the share of CPU time idle in")
    p("`/proc/stat` over a few seconds), and when it is busy waits and samples")
    p("again, then refuses to run; the thresholds and retries are knobs")
    p("(`BENCH_MAX_LOAD`, `BENCH_MIN_IDLE`, `BENCH_IDLE_RETRIES`,")
    p("`BENCH_IDLE_WAIT`, `BENCH_IDLE=warn` to run anyway; see the top of")
    p("`bench/bench.sh`).  Machine shows the sample the run started from,")
    p("one taken after it, and the load averages.")
    p("")
    p("## Machine")
    p("")
    with open(machine_path) as f:
        out.extend(l.rstrip("\n") for l in f)
    p("")


def case1():
    """Overhead: a capacity that never binds."""
    if not any(k[0] == "1" for k in runs):
        return
    p("## 1. Overhead: a capacity that never binds")
    p("")
    p("Backend: `memory 1G`, a 256M area written once before each run.")
    p("Throttle: `throttle-capacity=1G` (more than could ever be in flight),")
    p("other parameters at their defaults.  Peer: nbdkit's `rate` filter at")
    p("`rate=1T` (never binds).  Target: throttled/unthrottled >= 0.97.")
    p("The throttle runs with its defaults (`throttle-rt=auto`: the request")
    p("threads turn real-time only while a kernel nbd client on this machine")
    p("is connected, so not here), with `throttle-rt=on` (real-time")
    p("from the start, which on 2 cores preempts the client at every request),")
    p("and with `throttle-rt=off`, the cost of the budget alone.")
    p("")
    p("fio runs 2 jobs (2 connections) for 4K, the speed goal's workload.")
    p("Its `-pinned` rows run nbdkit on the last CPU and fio on the others")
    p("(taskset): the server's CPU then bounds the rate, so the ratio is the")
    p("filter's CPU cost per request.  Unpinned, the same server without a")
    p("filter swings by 40% from run to run (65k-107k IOPS, 1.3-2.8 context")
    p("switches per request, measured 2026-12-03) as the scheduler puts")
    p("fio's and nbdkit's threads on one CPU or apart: more than the few")
    p("percent being measured.  The goal is judged on the pinned 4K row.")
    p("")
    p("| workload | client | configuration | MiB/s (median) | / no filter | target 0.97 | p50 | p99 | max |")
    p("|---|---|---|---|---|---|---|---|---|")
    for wl in ("4k-randwrite-qd64", "4k-randwrite-qd64x2",
               "4k-randwrite-qd64x2-pinned", "1M-seqwrite-qd8",
               "1M-seqwrite-qd8-pinned"):
        for tool in ("load", "fio"):
            if not rounds("1", wl, "none", tool):
                continue
            for c in ("none", "throttle:1G", "throttle:1G+throttle-rt=on",
                      "throttle:1G+throttle-rt=off", "rate:1T"):
                if not rounds("1", wl, c, tool):
                    continue
                r = ratio("1", wl, c, "none", tool=tool) if c != "none" else None
                if c.startswith("throttle"):
                    target = "n/a" if r is None else ("met" if r[0] >= 0.97 else "**missed**")
                else:
                    target = ""
                p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    wl, "throttle-load" if tool == "load" else "fio nbd",
                    config_name(c), mib(med("1", wl, c, "bw", tool)),
                    fmt_ratio(r) if c != "none" else "1", target,
                    us(med("1", wl, c, "p50", tool)),
                    us(med("1", wl, c, "p99", tool)),
                    us(med("1", wl, c, "max", tool))))
    p("")


CASE2 = [
    ("4k-randwrite-4x16", "64K", 65536, "rate:50M",
     "4K random writes, 4 connections x queue depth 16 (256K wanted in flight)"),
    ("mix-4k95-1M5-4x16", "2M", 2 << 20, "rate:1600M",
     "95% 4K + 5% 1M random writes, 4 connections x queue depth 16"),
]

# case instr's setups: the backend as shown, and the setup whose "none"
# is the baseline.
INSTR_SETUPS = {
    "null": ("`null 1G`", "null"),
    "delay": ("`--filter=delay null 1G delay-write=%s`", "delay"),
    "delay2": ("as above; fio's two jobs on export names `a` and `b`", "delay"),
}


def read_instr():
    """instr.tsv and instr-waited.tsv, or None when case instr did not run:
    (header lines by key, [(setup, config, [per-round counts])],
    {(setup, config): (budget, [per-round shares])})."""
    path = os.path.join(res_dir, "instr.tsv")
    if not os.path.exists(path):
        return None
    head, rows, waited = {}, [], {}
    with open(path) as f:
        for line in f:
            r = line.rstrip("\n").split("\t")
            if r[0].startswith("#"):
                head[r[0][1:]] = r[1:]
            else:
                rows.append((r[0], r[1], [int(x) for x in r[2:]]))
    wpath = os.path.join(res_dir, "instr-waited.tsv")
    if os.path.exists(wpath):
        with open(wpath) as f:
            for line in f:
                r = line.rstrip("\n").split("\t")
                waited[(r[0], r[1])] = (r[2], [float(x) for x in r[3:]])
    return head, rows, waited


def case_instr():
    """Instructions per request (callgrind): what a filter costs the
    server's CPU per request, untouched by the machine's load."""
    got = read_instr()
    if got is None:
        return
    head, rows, waited = got
    counts = {(s, c): v for s, c, v in rows}
    p("## 1i. Instructions per request")
    p("")
    p("Instructions per request in the server (callgrind; 4K random")
    p("writes from fio, 2 jobs (2 connections), queue depth 64; the")
    p("difference of two runs of %s and %s MiB per job, so start-up and exit"
      % tuple(head["sizes"]))
    p("cancel out), over nbdkit's null plugin, which discards writes.")
    p("Unlike case 1's rates, this count does not move with the machine's load:")
    p("what varies from round to round, the range, is glibc malloc's path")
    p("in nbdkit (and, for the binding rows, how many requests waited).")
    p("The kernel's share of a request (the socket, the wake-ups) is not in")
    p("it, so a filter's share of the whole is smaller.")
    p("`make bench BENCH_CASES=instr` counts these alone in a few minutes")
    p("(to compare two builds).  This table: %s, commit %s, %s."
      % tuple(head["run"][:3]))
    p("")
    p("valgrind runs one thread at a time, so over the bare null plugin a")
    p("request is done before the next is read and no capacity ever binds.")
    p("The binding rows therefore run over nbdkit's delay filter (`delay-write=%s`," % head["delay"][0])
    p("below the throttle), where requests overlap, and are set against no")
    p("filter over the same delay, counted in the same round: with")
    p("`throttle-capacity=64K` the 2 connections' 32 nbdkit threads want up to")
    p("128K; with two export names, each wants up to 64K (its own capacity")
    p("never binds) and `throttle-server-capacity=64K` binds.  *Waited* is the")
    p("share of the larger run's extra requests that waited for the budget")
    p("that binds (from the control socket; above 1 when the smaller run")
    p("waited less).  A binding row's count grows with it, by over a")
    p("thousand instructions per waiting request, and it falls on a busy machine,")
    p("where valgrind's one running thread is late to read new requests:")
    p("compare binding rows of two builds at similar shares, counted on an")
    p("idle machine.  Differences and ratios are paired by round; each is")
    p("median (lowest-highest).")
    p("")
    p("| configuration | backend | instructions per request (median) | range, rounds | over no filter | / no filter | waited |")
    p("|---|---|---|---|---|---|---|")
    for setup, config, v in rows:
        backend, base = INSTR_SETUPS.get(setup, (setup, setup))
        if "%s" in backend:
            backend = backend % head["delay"][0]
        name = config_name(config)
        if config.startswith("throttle:") and "+" not in config and setup == "null":
            name += ", defaults"
        b = counts.get((base, "none"))
        if config == "none" or b is None:
            diff = ratio = ""
        else:
            d = [x - y for x, y in zip(v, b)]
            diff = "%+d (%+d to %+d)" % (statistics.median(d), min(d), max(d))
            ratio = fmt_spread((x / y for x, y in zip(v, b)), lambda r: "%.3f" % r)
        w = waited.get((setup, config))
        share = "" if w is None else "%s: %s" % (
            w[0], fmt_spread(w[1], lambda x: "%.3f" % x))
        p("| %s | %s | %d | %d-%d, %d | %s | %s | %s |" % (
            name, backend, statistics.median(v), min(v), max(v), len(v),
            diff, ratio, share))
    p("")


def case2():
    """Under pressure, throttle-load."""
    if not any(rounds("2", c[0], "none") for c in CASE2):
        return
    p("## 2. Under pressure: a capacity well below the demand")
    p("")
    p("Backend: the test suite's inflight plugin (`tests/test-inflight-plugin.c`):")
    p("every request sleeps 10 ms and the plugin records the peak bytes and")
    p("requests in flight *at the backend*, below every filter.  nbdkit runs")
    p("with `--threads=64` so the filter, not nbdkit's thread pool, bounds")
    p("what reaches the backend.  The backend's limit under a capacity C is")
    p("C / 10 ms; the rate filter is set to that same throughput (of the")
    p("limit: per round, then median, range and rounds).  Fairness")
    p("is Jain's index over the 4 connections' bytes (target >= 0.95).")
    p("Peaks are the maximum over rounds; latencies and maxima of latency")
    p("the median over rounds (one stalled run on a busy machine would")
    p("otherwise decide the column).")
    p("")
    for wl, cap, capb, ratecfg, desc in CASE2:
        limit = capb / 0.010
        p("### %s" % desc)
        p("")
        p("Capacity %s: backend limit %.2f MiB/s." % (cap, limit / MiB))
        p("")
        p("| configuration | MiB/s | of the limit | peak in flight at backend (bytes / requests) | <= capacity | fairness | 4K p99 | max latency of 1M | max latency of all |")
        # (latencies in ms here: waits under pressure are long)
        p("|---|---|---|---|---|---|---|---|---|")
        for c in ("none", "throttle:" + cap, ratecfg):
            rs = rounds("2", wl, c)
            if not rs:
                continue
            bw = med("2", wl, c, "bw")
            peak_b = max(r.state.get("peak_bytes", 0) for r in rs.values())
            peak_r = max(r.state.get("peak_requests", 0) for r in rs.values())
            p4 = statistics.median(r.by_size[4096]["p99"] for r in rs.values())
            l1 = [r.by_size[1 << 20]["max"] for r in rs.values()
                  if (1 << 20) in r.by_size and r.by_size[1 << 20]["count"]]
            fair = [r.fairness for r in rs.values()]
            frac = ratio_values(r.bw / limit for r in rs.values())
            p("| %s | %s | %s | %d / %d (max over rounds) | %s | %.3f (%.3f-%.3f) | %s | %s | %s ms |" % (
                config_name(c), mib(bw), fmt_ratio(frac), peak_b, peak_r,
                "yes" if peak_b <= capb else "**no**",
                statistics.median(fair), min(fair), max(fair),
                "%s ms" % ms(p4),
                ("%s ms" % ms(statistics.median(l1))) if l1 else "-",
                ms(statistics.median(r.max for r in rs.values()))))
        p("")


# Case 2m: the configurations, their labels in the table and the plot.
CASE2M_WL = "mixed-4k4x16-1M1x4"
CASE2M_CAP = 2 << 20
CASE2M_LIMIT = CASE2M_CAP / 0.010
CASE2M = [
    ("none", "no filter"),
    ("throttle:2M+throttle-split=false", "FIFO, whole requests (before)"),
    ("throttle:2M", "served in parts (after)"),
]
CASE2M_BEFORE, CASE2M_AFTER = CASE2M[1][0], CASE2M[2][0]


def job(r, name):
    """The FioJob NAME of run r (an empty one if fio reported none)."""
    return r.jobs.get(name) or FioJob()


def poll_trace(path):
    """The lines of a capacity-poll.py trace (bench.sh start_poller):
    time, capacity, units charged, in flight, requests waiting; none if
    no trace was taken (no filter)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [[float(x) for x in l.split()] for l in f if l.strip()]


def units_idle(r):
    """From run r's samples of the budget (bench.sh UNITS_POLL): the
    samples taken while the load ran, the mean units in flight, the
    share of samples with requests waiting, and the units free while
    some waited and while none did, as fractions of the capacity; None
    without samples (no filter)."""
    tr = poll_trace(r.path[:-len(".json")] + ".units")
    # The load ran from the first charge to the last.
    start = next((i for i, x in enumerate(tr) if x[2] > 0), None)
    if start is None:
        return None
    end = max((i for i in range(1, len(tr)) if tr[i][2] > tr[i - 1][2]),
              default=start)
    w = tr[start:end + 1]
    if len(w) < 10:
        return None
    n, cap = len(w), w[0][1]
    waiting = [x for x in w if x[4] > 0]
    return (n, sum(x[3] for x in w) / n / cap, len(waiting) / n,
            sum(max(x[1] - x[3], 0) for x in waiting) / n / cap,
            sum(max(x[1] - x[3], 0) for x in w if x[4] == 0) / n / cap)


def case2m_units():
    """Where the units went in case 2m's throttled runs."""
    rows = []
    for c, label in CASE2M[1:]:
        u = [x for x in map(units_idle, rounds("2m", CASE2M_WL, c, "fio").values())
             if x is not None]
        if u:
            rows.append((label, c, u))
    if not rows:
        return
    p("Where the units went: the budget sampled over the control socket")
    p("every 2 ms while the load ran (`stats`: units in flight, requests")
    p("waiting), as fractions of the capacity.  Units free while requests")
    p("wait are held back by the order of the queue (the head needs more")
    p("than is free); units free while none waits have no request to take")
    p("them: every request is in flight or on its way between the client")
    p("and the filter.  What is in flight but not producing is the time")
    p("from a grant to the plugin's call (a waiter's wake-up: 0.25 ms on")
    p("average, measured on 2 cores) and from its return to the credit, and")
    p("the backend's own overshoot of its 10 ms (10.19 ms per unit, measured).")
    p("")
    p("| configuration | rounds | samples | in flight | samples with requests waiting | free while requests wait | free while none waits |")
    p("|---|---|---|---|---|---|---|")
    for label, c, u in rows:
        f3 = lambda x: "%.3f" % x
        p("| %s: %s | %d | %s | %s | %s | %s | %s |" % (
            label, config_name(c), len(u),
            fmt_spread((x[0] for x in u), lambda x: "%d" % x),
            fmt_spread((x[1] for x in u), f3), fmt_spread((x[2] for x in u), f3),
            fmt_spread((x[3] for x in u), f3), fmt_spread((x[4] for x in u), f3)))
    p("")


def case2m():
    """Mixed sizes with fio: FIFO before vs parts after."""
    if not any(rounds("2m", CASE2M_WL, c, "fio") for c, _ in CASE2M):
        return
    p("## 2m. Mixed sizes with fio: strict FIFO before, large requests in parts after")
    p("")
    p("The speed goal's mixed workload.  One fio run (`--ioengine=nbd`),")
    p("two job sections: 4 jobs of 4K random writes at iodepth 16, and one")
    p("job of 1M sequential writes at iodepth 4.  Backend: the inflight")
    p("plugin of case 2 (every write held 10 ms, peak bytes in flight")
    p("recorded below every filter), nbdkit `--threads=64`.  Capacity 2M:")
    p("the backend's limit is 2M / 10 ms = %.0f MiB/s." % (CASE2M_LIMIT / MiB))
    p("`throttle-split=false` is the budget as it was: every request charged")
    p("whole, in strict FIFO order, so a 1M write at the head waits for half")
    p("the capacity to be free while the units freed meanwhile stay idle.")
    p("The default (`throttle-split=true`) serves a page-aligned request")
    p("larger than a quarter of the capacity in parts, each charged on its")
    p("own, one after another in the request's own thread (see *Large")
    p("requests are served in parts* in nbdkit-throttle-design(1)).")
    p("Goals: at least 0.95 of the limit, the")
    p("peak at the backend at most 2M, no 1M write slower than 1 s, and 4K")
    p("p99 no worse than before.")
    p("")
    p("Every cell: median (lowest-highest) over the rounds counted in the")
    p("second column.  Throughput is fio's, all five jobs summed; 4K p99 is")
    p("the completion latency of the four 4K jobs together (fio's")
    p("`group_reporting`); 1M max is the 1M job's slowest write, submission")
    p("to completion.")
    p("")
    p("| configuration | rounds | of the limit | MiB/s: 4K + 1M | peak at backend (bytes) | <= 2M | 4K p99 (ms) | 1M max latency (ms) | 1M writes done |")
    p("|---|---|---|---|---|---|---|---|---|")
    for c, label in CASE2M:
        rs = rounds("2m", CASE2M_WL, c, "fio")
        if not rs:
            continue
        v = list(rs.values())
        peaks = [r.state.get("peak_bytes", 0) for r in v]
        p("| %s | %d | %s | %s + %s | %s | %s | %s | %s | %s |" % (
            label if c == "none" else "%s: %s" % (label, config_name(c)), len(v),
            fmt_spread((r.bw / CASE2M_LIMIT for r in v), lambda x: "%.3f" % x),
            fmt_spread((job(r, "4k").bw for r in v), mib),
            fmt_spread((job(r, "1M").bw for r in v), mib),
            fmt_spread(peaks, lambda x: "%d" % x),
            "n/a" if c == "none" else ("yes" if max(peaks) <= CASE2M_CAP else "**no**"),
            fmt_spread((job(r, "4k").p99() for r in v), ms),
            fmt_spread((job(r, "1M").lat_max for r in v), ms),
            fmt_spread((job(r, "1M").ios for r in v), lambda x: "%d" % x)))
    p("")
    case2m_units()
    before = rounds("2m", CASE2M_WL, CASE2M_BEFORE, "fio")
    after = rounds("2m", CASE2M_WL, CASE2M_AFTER, "fio")
    if after:
        frac = ratio_values(r.bw / CASE2M_LIMIT for r in after.values())
        peak = max(r.state.get("peak_bytes", 0) for r in after.values())
        worst = max(job(r, "1M").lat_max for r in after.values())
        p("Goals, served in parts (after):")
        p("")
        p("- throughput %s of the limit: %s (goal >= 0.95, on the median)" % (
            fmt_ratio(frac), "met" if frac[0] >= 0.95 else "**missed**"))
        p("- peak at the backend, highest round: %d bytes: %s (goal <= %d)" % (
            peak, "met" if peak <= CASE2M_CAP else "**missed**", CASE2M_CAP))
        p("- slowest 1M write, slowest round: %s ms: %s (goal <= 1000 ms)" % (
            ms(worst), "met" if worst <= 1e6 else "**missed**"))
        if before:
            pr = ratio_values(job(after[k], "4k").p99() / job(before[k], "4k").p99()
                              for k in after if k in before and job(before[k], "4k").p99())
            p("- 4K p99 after / before, per round: %s: %s (goal <= 1, on the median)" % (
                fmt_ratio(pr), "n/a" if pr is None else
                ("met" if pr[0] <= 1.0 else "**missed**")))
            p("- throughput after / before, per round: %s" % fmt_ratio(
                ratio("2m", CASE2M_WL, CASE2M_AFTER, CASE2M_BEFORE, tool="fio")))
        p("")
    p("![latency CDF of case 2m](bench/mixed-cdf.svg)")
    p("")
    p("`bench/mixed-cdf.svg`: the completion latency distribution (CDF) of")
    p("the 4K and of the 1M writes of case 2m, from fio's latency histograms")
    p("(`--output-format=json+`) pooled over all rounds: FIFO before, parts")
    p("after, and no filter for reference.")
    p("")


def case2m_plot():
    """CDF files and plot commands for mixed-cdf.gp, if case 2m ran."""
    panels = []
    for name, title in (("4k", "4K random writes: 4 jobs x iodepth 16"),
                        ("1M", "1M writes: 1 job x iodepth 4")):
        items = []
        for c, label in (CASE2M[1], CASE2M[2], CASE2M[0]):
            bins = {}
            for r in rounds("2m", CASE2M_WL, c, "fio").values():
                for lat, n in job(r, name).bins.items():
                    bins[lat] = bins.get(lat, 0) + n
            total = sum(bins.values())
            if not total:
                continue
            path = os.path.join(res_dir, "mixed-%s-%s.cdf" % (
                name, c.replace(":", "_").replace("+", "_").replace("=", "_")))
            seen = 0
            with open(path, "w") as f:
                f.write("# latency_ms fraction_at_or_below\n")
                for lat in sorted(bins):
                    seen += bins[lat]
                    f.write("%.6f %.6f\n" % (lat / 1e6, seen / total))
            items.append("'%s' using 1:2 with steps title '%s'" % (
                path, label.replace("'", "")))
        if items:
            panels.append("set title '%s; capacity 2M, 10 ms backend'\n"
                          "plot %s\n" % (title, ", \\\n     ".join(items)))
    path = os.path.join(res_dir, "plotcmd-mixed.gp")
    if not panels:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write("set multiplot layout 1,%d\n" % len(panels))
        f.write("".join(panels))
        f.write("unset multiplot\n")


def case3():
    """Peers: prose only."""
    p("## 3. Peers")
    p("")
    p("nbdkit's `rate` filter appears in every table above, set to a rate")
    p("that never binds in case 1 and to the throttle's own limit in cases 2")
    p("and 4.  fio's `nbd` engine (`--ioengine=nbd`) is the second,")
    p("independent client of case 1, and the only client of case 2m.")
    p("")


def case4():
    """Write-behind over a slow backend."""
    if not any(k[0] == "4" for k in runs) and not any(k[0] == "4" for k in unavailable):
        return
    p("## 4. Write-behind over a slow backend")
    p("")
    p("Backend: `memory 1G` under nbdkit's `delay` filter, `delay-write=5ms`;")
    p("a 64M area written once (1M writes) before each run, and with")
    p("writeback 1 s more for the pool to drain.")
    p("Throttle: `throttle-capacity=8M`, `throttle-mode=writethrough` or")
    p("`writeback` (pool: the default, the whole budget), other parameters at")
    p("their defaults.  burst: 4M of 4K random writes, queue depth 16 (fits")
    p("in the budget); sustained: 4K random writes at queue depth 16 for the")
    p("whole run (writeback fills its pool in a fraction of a second, then")
    p("goes at the speed its writer threads drain it: 16 by default, 4 in")
    p("the extra row (the default of serialize_requests), against nbdkit's 16 request")
    p("threads in writethrough).")
    p("Peak RSS: nbdkit's VmHWM, median over rounds.")
    p("")
    p("| configuration | burst MiB/s | burst p50 / p99 / max | sustained MiB/s | sustained p50 / p99 / max | peak RSS MiB |")
    p("|---|---|---|---|---|---|")
    for c in ("none", "throttle:8M:writethrough", "throttle:8M:writeback",
              "throttle:8M:writeback+throttle-writeback-threads=4", "rate:100M"):
        if ("4", "4k-burst-4M-qd16", c) in unavailable:
            p("| %s | not available: nbdkit rejected the parameter | | | | |" % config_name(c))
            continue
        b, s = "4k-burst-4M-qd16", "4k-sustained-qd16"
        if not rounds("4", b, c):
            continue
        rss = statistics.median(r.rss_kib for r in rounds("4", s, c).values()) / 1024.0
        p("| %s | %s | %s / %s / %s ms | %s | %s / %s / %s ms | %.0f |" % (
            config_name(c),
            mib(med("4", b, c, "bw")), ms(med("4", b, c, "p50")),
            ms(med("4", b, c, "p99")), ms(med("4", b, c, "max")),
            mib(med("4", s, c, "bw")), ms(med("4", s, c, "p50")),
            ms(med("4", s, c, "p99")), ms(med("4", s, c, "max")), rss))
    p("")
    wb = ratio("4", "4k-burst-4M-qd16", "throttle:8M:writeback", "throttle:8M:writethrough")
    ws = ratio("4", "4k-sustained-qd16", "throttle:8M:writeback", "throttle:8M:writethrough")
    if ("4", "4k-burst-4M-qd16", "throttle:8M:writeback") in unavailable:
        p("writeback: not available (nbdkit rejected `throttle-mode=writeback`).")
    else:
        p("Throughput writeback / writethrough: burst %s, sustained %s." % (
            fmt_ratio(wb), fmt_ratio(ws)))
    p("")
    p("![latency distributions](bench/latency.svg)")
    p("")
    p("`bench/latency.svg`: the latency distribution (CDF) of each")
    p("configuration of case 4 in the last round.")


def case4_plot():
    """CDF file names and plot commands for latency.gp, if case 4 ran."""
    cmds = []
    for panel, wl in (("burst", "4k-burst-4M-qd16"), ("sustained", "4k-sustained-qd16")):
        items = []
        for c, title in (("none", "no filter"),
                         ("throttle:8M:writethrough", "throttle writethrough"),
                         ("throttle:8M:writeback", "throttle writeback"),
                         ("rate:100M", "rate filter")):
            rs = rounds("4", wl, c)
            if not rs:
                continue
            r = rs[max(rs)]
            if os.path.exists(r.cdf):
                items.append("'%s' using ($1/1000):3 with steps title '%s'" % (r.cdf, title))
        if items:
            cmds.append("set title '%s: 4K random writes, queue depth 16, 5 ms backend'\n"
                        "plot %s\n" % (panel, ", \\\n     ".join(items)))
    path = os.path.join(res_dir, "plotcmd.gp")
    if not cmds:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write("set multiplot layout 1,%d\n" % len(cmds))
        f.write("".join(cmds))
        f.write("unset multiplot\n")


# --- 5 --------------------------------------------------------------
CASE5 = (("none", "no filter"),
         ("ceiling", "fixed capacity = ceiling (8M)"),
         ("floor", "fixed capacity = floor (256K)"),
         ("adaptive", "latency target 5ms, 256K to 8M"))


def cap_trace(r):
    """(t, capacity, charged) lines of the run's control-socket trace."""
    return [tuple(x[:3]) for x in poll_trace(r.path[:-len(".writers.json")] + ".cap")]


def reader_window(r):
    """Writers' B/s and the capacities seen while the reader ran (from
    1 s after the writers started to their end), or None without a
    trace (no filter)."""
    tr = cap_trace(r)
    end = max((t for t, _, _ in tr), default=0)
    w = [x for x in tr if 1.0 <= x[0] <= end - 0.1]
    if len(w) < 2 or w[-1][0] <= w[0][0]:
        return None
    return ((w[-1][2] - w[0][2]) / (w[-1][0] - w[0][0]),
            [c for _, c, _ in w])


def case5():
    """A latency target: a reader among writers."""
    if not any(rounds("5", "reader", c) for c, _ in CASE5):
        return
    p("## 5. A latency target: a reader among writers")
    p("")
    p("Backend: the inflight plugin with `delay-ms=1 bandwidth=100M`: a")
    p("request takes 1 ms plus the bytes in flight at its arrival (its own")
    p("included) / 100 MiB/s, so 8M in flight make every request wait")
    p("about 81 ms.  Load: 4 writers keep 8 writes of 256K outstanding")
    p("each (8M), random offsets, for the whole run; one reader does 4K")
    p("random reads at queue depth 1 from 1 s after the writers start")
    p("(its numbers are the steady state; the plot shows the start).")
    p("Every throttle configuration runs with `throttle-rt=off`, so reads")
    p("are not charged (a charged read would queue behind the writes).")
    p("Writers' throughput while the reader ran comes from the units the")
    p("throttle charged, read on its control socket every 50 ms (n/a")
    p("without the filter).  Medians over rounds; the ratio to the ceiling")
    p("is taken within each round.")
    p("")
    p("| configuration | reader p50 | reader p99 | reader max | writers MiB/s, whole run | writers MiB/s while the reader ran | / ceiling | capacity while the reader ran: median (min-max) |")
    p("|---|---|---|---|---|---|---|---|")
    win = {}
    for c, name in CASE5:
        rr, ww = rounds("5", "reader", c), rounds("5", "writers", c)
        if not rr:
            continue
        win[c] = {k: reader_window(w) for k, w in ww.items()}
        bws = [v[0] for v in win[c].values() if v]
        caps = sorted(x for v in win[c].values() if v for x in v[1])
        ratios = [win[c][k][0] / win["ceiling"][k][0]
                  for k in win[c] if win[c][k] and "ceiling" in win
                  and win["ceiling"].get(k)]
        p("| %s | %s ms | %s ms | %s ms | %s | %s | %s | %s |" % (
            name, ms(med("5", "reader", c, "p50")),
            ms(med("5", "reader", c, "p99")), ms(med("5", "reader", c, "max")),
            mib(med("5", "writers", c, "bw")),
            mib(statistics.median(bws)) if bws else "n/a",
            fmt_ratio(ratio_values(ratios)),
            ("%d (%d-%d)" % (statistics.median(caps), caps[0], caps[-1]))
            if caps else "n/a"))
    p("")
    p99 = med("5", "reader", "adaptive", "p99")
    ratios = [win["adaptive"][k][0] / win["ceiling"][k][0]
              for k in win.get("adaptive", {})
              if win["adaptive"][k] and win.get("ceiling", {}).get(k)]
    if p99 is not None:
        p("Goal, reader p99 at most 10 ms with the 5 ms target: %s ms, %s." % (
            ms(p99), "met" if p99 <= 10000 else "**missed**"))
    if ratios:
        rm = statistics.median(ratios)
        p("Goal, writers keep at least 60%% of their throughput at the "
          "ceiling: %.0f%% (%.0f-%.0f%% over rounds), %s." % (
              100 * rm, 100 * min(ratios), 100 * max(ratios),
              "met" if rm >= 0.60 else "**missed**"))
    p("")
    p("![capacity over time and reader latency](bench/adapt.svg)")
    p("")
    p("`bench/adapt.svg`: left, the capacity over time in each round of the")
    p("adaptive configuration (the reader starts at 1 s); right, the")
    p("reader's latency distribution (CDF) in each configuration, last round.")


def case5_plot():
    """Plot commands for adapt.gp, if case 5 ran."""
    cmd5 = ""
    ad = rounds("5", "writers", "adaptive")
    caps = ["'%s' using 1:($2/1024) with steps title 'round %d'" % (
                r.path[:-len(".writers.json")] + ".cap", k)
            for k, r in sorted(ad.items())
            if os.path.exists(r.path[:-len(".writers.json")] + ".cap")]
    cdfs = []
    for c, title in (("none", "no filter"), ("ceiling", "fixed 8M"),
                     ("floor", "fixed 256K"), ("adaptive", "target 5ms")):
        rs = rounds("5", "reader", c)
        if rs and os.path.exists(rs[max(rs)].cdf):
            cdfs.append("'%s' using ($1/1000):3 with steps title '%s'" % (
                rs[max(rs)].cdf, title))
    if caps or cdfs:
        cmd5 = "set multiplot layout 1,2\n"
        if caps:
            cmd5 += ("set title 'latency target 5 ms: effective capacity'\n"
                     "set xlabel 'seconds since the writers started'\n"
                     "set ylabel 'capacity (KiB, log scale)'\n"
                     "set logscale y\nunset logscale x\nset yrange [128:16384]\n"
                     "set key top right\n"
                     "set format x '%%g'\n"
                     "plot %s\n" % ", \\\n     ".join(
                         caps + ["256 with lines dt 2 lc 'gray' title 'floor 256K'",
                                 "8192 with lines dt 3 lc 'gray' title 'ceiling 8M'"]))
        if cdfs:
            cmd5 += ("set title 'reader: 4K random reads at depth 1 among writers'\n"
                     "set xlabel 'latency (ms, log scale)'\n"
                     "set ylabel 'fraction of reads at or below'\n"
                     "unset logscale y\nset logscale x\nset yrange [0:1.02]\n"
                     "set key bottom right\n"
                     "plot %s\n" % ", \\\n     ".join(cdfs))
        cmd5 += "unset multiplot\n"
    path = os.path.join(res_dir, "adaptcmd.gp")
    if not cmd5:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write(cmd5)



def case_tests():
    """Measurements made by the tests and by hand, which make bench does
    not repeat: the design page points here for its numbers."""
    p("")
    p("## Measured by the tests and by hand")
    p("")
    p("Not written by `make bench`: what the design in")
    p("nbdkit-throttle-design(1) rests on, measured once by the test or")
    p("command named, on the shared 2-core development machine.")
    p("")
    p("- The reserve (`throttle-reserve`), first-touch faults: a 16 MiB write")
    p("  to a fresh worker over the null plugin costs 4097 minor page faults")
    p("  without the reserve and 0 with it (`tests/test-guards.sh`).")
    p("- The reserve's cost: 4 connections of 32 concurrent 4 KiB writes over")
    p("  the null plugin, runs with and without the reserve alternating:")
    p("  throughput ratio 0.99 (0.65-1.37, 6 pairs, a busy machine), no cost")
    p("  the noise lets one see.")
    p("- What `throttle-mlock` pins: nbdkit's resident set, about 22 MiB with")
    p("  the null plugin and the default reserve, 27 MiB over the disk plugin")
    p("  in the swap guest.  Under `onfault` `VmLck` counts about 200 MiB,")
    p("  mostly nbdkit 1.32's 192 MiB BSS, touched or not.")
    p("- `throttle-mlock=pool` is not safe for swap: in the swap guest test")
    p("  (`tests/swap/`, the filter over the disk plugin, one connection)")
    p("  nbdkit hung in 2 of 3 boots with `pool`, its worker threads in")
    p("  `do_swap_page` for pages of its own heap; with `onfault` 3 of 3")
    p("  completed, and at the default (`auto`, as root) 3 of 3.")
    p("- `vm.min_free_kbytes=16384`: in 192 MiB guests, the filter over the")
    p("  disk plugin at its defaults completed writeout and swap-in in 12 of")
    p("  12 boots (writethrough and writeback, one and two connections); the")
    p("  one configuration run without the setting also completed, so there")
    p("  the real-time reserve alone sufficed and the setting is a margin.")
    p("- The cost of real-time threads (`throttle-rt=on`) with client and")
    p("  server on the same CPUs: fio's nbd engine, 4 KiB random writes at")
    p("  depth 64, 2 jobs, the memory plugin, `throttle-capacity=1G` (never")
    p("  binds), unpinned on 2 CPUs, as root: the fio jobs preempted about")
    p("  40,000 times a second each, 5.3 to 8 context switches per request")
    p("  instead of 1.2 to 1.8, 0.1 to 0.5 CPU migrations per request instead")
    p("  of none, and 0.25 to 0.5 of the throughput without the filter (see")
    p("  case 1).  On different CPUs, nothing measurable.")
    p("- Memory a client can pin (`tests/test-lockedmem.sh`, the null plugin,")
    p("  defaults, 16 threads): with no client `VmRSS` 25 MiB and `VmLck` 222")
    p("  MiB; after 8 writes and a read of 32 MiB each (all refused with")
    p("  `EINVAL`), then 4 connections sending 16 writes of 4 MiB each")
    p("  (`VmRSS` 165 to 210 MiB meanwhile), 0.1 to 0.2 s after they closed")
    p("  `VmRSS` 25 MiB and `VmLck` 254 MiB (4 cached stacks), in 20 runs of")
    p("  20.  With no bound on requests but nbdkit's own (64M), one client's")
    p("  16 writes of 32 MiB")
    p("  left `VmRSS` 517 MiB and `VmLck` 746 MiB until nbdkit exited.  In the")
    p("  same test's burst with the 4 clients connecting just before their")
    p("  writes, 2 of 80 runs kept 16 MiB in glibc's cached thread tables.")
    p("- Writeback's write latency: over nbdkit's delay filter with")
    p("  `delay-write=100ms`, `tests/test-writeback.sh` prints a median write")
    p("  latency of 0.05 to 0.15 ms against 100 ms in writethrough (a ratio of")
    p("  650 to 2000 in its runs), while the pool and the budget have room.")
    p("- nbdkit's loss at disconnect (`tests/nbdkit-disc-loss.sh`, nbdkit's")
    p("  eval plugin alone, a loaded machine): of 50 connections that each")
    p("  queued 8 writes and ended at once, nbdkit 1.32.5 lost the last write")
    p("  or two on 2 (`NBD_CMD_DISC`) and 3 (half-close); 1.44.1 lost none of")
    p("  50 and 50.")
    p("")
    p("### The demo")
    p("")
    p("`./dev.sh demo`: nbdkit's memory plugin under")
    p("`throttle-capacity=1M`, driven by `throttle-load` (4 connections x 32")
    p("requests, 90% 4K + 10% 1M writes, 10 s, then `--verify`), then what")
    p("the throttle reported on its control socket and in nbdkit's summary")
    p("line at exit.  One real run, on the 2-core development machine as root")
    p("(2026-12-03; numbers vary from run to run):")
    p("")
    p("```")
    p("== nbdkit --filter=throttle memory 1G throttle-capacity=1M")
    p("   driven by throttle-load: 4 connections x 32 requests, 90% 4K + 10% 1M writes, 10 s")
    p("elapsed 10.003 s, 83512 requests, 9061384192 bytes (0 read, 9061384192 written)")
    p("throughput 863.88 MiB/s, 8349 IOPS")
    p("")
    p("  latency us   requests       mean        p50        p99      p99.9        max")
    p("  all             83512    15248.7    11927.6    52428.8    71303.2    97494.5")
    p("  write           83512    15248.7    11927.6    52428.8    71303.2    97494.5")
    p("  4k              75164    15201.6    11927.6    52428.8    69206.0    97494.5")
    p("  1M               8348    15672.7    12320.8    53477.4    92274.7    97104.0")
    p("")
    p("max latency of the largest size (1M): 97104.0 us")
    p("")
    p("fairness (Jain) 0.9998 over 4 connections")
    p("verify: 1072934912 bytes checked, 0 bad blocks")
    p("")
    p("throttle (control socket):")
    p("  export \"\": capacity 1048576, peak in flight 1048576, units charged 10134319104")
    p("    admitted 84577, waited 16452, wait total 3.582 s, max 12.2 ms")
    p("== nbdkit at exit: summary export=\"\" capacity=1048576 in_flight=0 peak=1048576 charged=10134319104 admitted=84577 waited=16452 ...")
    p("```")
    p("")
    p("The throttle charged more than was written because the verify pass's")
    p("reads were charged too: as root the request threads may become")
    p("real-time (`throttle-rt=auto` switches them on while a kernel nbd")
    p("client of root or the server's uid is connected, and off again a")
    p("minute after),")
    p("and then reads are bounded as well, from the start.")
    p("")
    p("### The swap guest test")
    p("")
    p("`make check-swap` (`tests/swap/`; its README.md says what each")
    p("configuration is and how to read the table), one full run on the")
    p("shared 2-core development machine (2026-12-03, on that day's main:")
    p("568 s, load average 2 to 7 from other work; guests under TCG,")
    p("`qemu-system-x86_64 -accel tcg`, 320 MiB; before the `remote-*` rows")
    p("existed).  All 15 MUST boots passed; the guards lines, omitted here,")
    p("were ok in every MUST boot; `units-wt-c2` boots the swap unit's own")
    p("command lines:")
    p("")
    p("```")
    p("configuration                      kind     boots writeout  swap-in  hung  other  wo-med-s  si-med-s tot-med-s  wo-x  si-x tot-x")
    p("disk-wt-c1                         MUST         3        3        3     0      0       1.8      34.1      36.5  2.00  3.07  3.04 PASS")
    p("disk-wt-c2                         MUST         3        3        3     0      0       1.8      32.2      34.5  2.00  2.90  2.88 PASS")
    p("disk-wb-c1                         MUST         3        3        3     0      0       2.2      36.0      38.2  2.44  3.24  3.18 PASS")
    p("disk-wb-c2                         MUST         3        3        3     0      0       2.8      40.5      43.4  3.11  3.65  3.62 PASS")
    p("units-wt-c2                        MUST         3        3        3     0      0       2.2      36.2      38.4  2.44  3.26  3.20 PASS")
    p("disk-wt-c1-nomin                   recorded     1        1        1     0      0       2.2      36.5      38.7  2.44  3.29  3.23")
    p("filter-file                        recorded     1        0        0     1      0         -         -         -     -     -     -")
    p("filter-memory                      recorded     1        1        1     0      0       2.0      18.4      20.4  2.22  1.66  1.70")
    p("baseline-file                      recorded     1        0        0     1      0         -         -         -     -     -     -")
    p("raw-disk                           recorded     3        3        3     0      0       0.9      11.1      12.0  1.00  1.00  1.00")
    p("```")
    p("")
    p("Swap over NBD was not within 2x of the raw disk under TCG: the")
    p("guest's one emulated CPU is busy all through the swap-in phase on both")
    p("paths, and over NBD it also runs nbdkit and, for a disk-backed export,")
    p("a second pass of every request through the guest's block layer")
    p("(nbdkit's `O_DIRECT` I/O), while the raw disk's I/O is served by qemu")
    p("natively on the host; the ratio therefore grows with the host's load")
    p("(`tests/swap/README.md`, Reading the table).")
    p("")


header()
case1()
case_instr()
case2()
case2m()
case3()
case4()
case5()
case_tests()
print("\n".join(out))
case4_plot()
case2m_plot()
case5_plot()
