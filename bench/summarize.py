#!/usr/bin/env python3
"""Turn the results of bench.sh into BENCHMARKS.md (on stdout) and the
gnuplot data of the latency plot.

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


def load_result(tool, path):
    """Throughput (B/s), IOPS and latencies (us) from a client's JSON."""
    with open(path) as f:
        j = json.load(f)
    r = Run()
    if tool == "load":
        if j["status"] != "ok":
            raise SystemExit("%s: run failed: %s" % (path, j.get("error")))
        r.bw = j["throughput"]
        r.iops = j["iops"]
        lat = j["latency_us"]
        r.p50, r.p99, r.p999, r.max = lat["p50"], lat["p99"], lat["p99.9"], lat["max"]
        r.fairness = j["fairness"]
        r.largest = j["largest_size"]
        r.largest_max = j["largest_size_max_latency_us"]
        r.by_size = {s["size"]: s["latency_us"] for s in j["by_size"]}
    else:
        w = j["jobs"][0]["write"]
        r.bw = float(w["bw_bytes"])
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


def ratio(case, wl, num, den, attr="bw", tool="load"):
    """Median and range over rounds of num/den, paired by round."""
    a, b = rounds(case, wl, num, tool), rounds(case, wl, den, tool)
    v = [a[k].__dict__[attr] / b[k].__dict__[attr]
         for k in a if k in b and b[k].__dict__[attr]]
    if not v:
        return None
    return statistics.median(v), min(v), max(v)


def fmt_ratio(r):
    if r is None:
        return "n/a"
    return "%.3f (%.3f-%.3f)" % r


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
p("# Benchmarks")
p("")
p("Written by `make bench` (`bench/bench.sh`); do not edit by hand.  Every")
p("number below was measured in the run described here.  Configurations")
p("alternate within each round; a ratio is taken within a round and the")
p("median over rounds is shown with the range in parentheses.  Latencies")
p("are from `throttle-load` (request handed to libnbd to reply read) or")
p("fio's completion latency, in microseconds unless marked ms.")
p("The ranges are run-to-run noise: the machine is shared, and the load")
p("average under Machine says how busy it was with other work (on 2")
p("cores, anything above 2 means the benchmark waited for CPU).")
p("")
p("## Machine")
p("")
with open(machine_path) as f:
    out.extend(l.rstrip("\n") for l in f)
p("")

# --- 1 --------------------------------------------------------------
p("## 1. Overhead: a capacity that never binds")
p("")
p("Backend: `memory 1G`, a 256M area written once before each run.")
p("Throttle: `throttle-capacity=1G` (more than could ever be in flight),")
p("other parameters at their defaults.  Peer: nbdkit's `rate` filter at")
p("`rate=1T` (never binds).  Target: throttled/unthrottled >= 0.97.")
p("The throttle runs with its defaults, and with `throttle-rt=off` to")
p("separate the cost of the budget from that of the request threads'")
p("real-time priority (`throttle-rt=auto` makes them SCHED_FIFO when it")
p("can, which it can here: on 2 cores they then preempt the client).")
p("")
p("| workload | client | configuration | MiB/s (median) | / no filter | target 0.97 | p50 | p99 | max |")
p("|---|---|---|---|---|---|---|---|---|")
for wl in ("4k-randwrite-qd64", "1M-seqwrite-qd8"):
    for tool in ("load", "fio"):
        if not rounds("1", wl, "none", tool):
            continue
        for c in ("none", "throttle:1G", "throttle:1G+throttle-rt=off", "rate:1T"):
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

# --- 2 --------------------------------------------------------------
CASE2 = [
    ("4k-randwrite-4x16", "64K", 65536, "rate:50M",
     "4K random writes, 4 connections x queue depth 16 (256K wanted in flight)"),
    ("mix-4k95-1M5-4x16", "2M", 2 << 20, "rate:1600M",
     "95% 4K + 5% 1M random writes, 4 connections x queue depth 16"),
]
if any(rounds("2", c[0], "none") for c in CASE2):
    p("## 2. Under pressure: a capacity well below the demand")
    p("")
    p("Backend: the test suite's inflight plugin (`tests/test-inflight-plugin.c`):")
    p("every request sleeps 10 ms and the plugin records the peak bytes and")
    p("requests in flight *at the backend*, below every filter.  nbdkit runs")
    p("with `--threads=64` so the filter, not nbdkit's thread pool, bounds")
    p("what reaches the backend.  The backend's limit under a capacity C is")
    p("C / 10 ms; the rate filter is set to that same throughput.  Fairness")
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
            p("| %s | %s | %.3f | %d / %d (max over rounds) | %s | %.3f (%.3f-%.3f) | %s | %s | %s ms |" % (
                config_name(c), mib(bw), bw / limit, peak_b, peak_r,
                "yes" if peak_b <= capb else "**no**",
                statistics.median(fair), min(fair), max(fair),
                "%s ms" % ms(p4),
                ("%s ms" % ms(statistics.median(l1))) if l1 else "-",
                ms(statistics.median(r.max for r in rs.values()))))
        p("")

# --- 3 --------------------------------------------------------------
p("## 3. Peers")
p("")
p("nbdkit's `rate` filter appears in every table above, set to a rate")
p("that never binds in case 1 and to the throttle's own limit in cases 2")
p("and 4.  fio's `nbd` engine (`--ioengine=nbd`) is the second,")
p("independent client of case 1.")
p("")

# --- 4 --------------------------------------------------------------
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
p("goes at the speed its writer threads drain it: 4 by default, 16 in")
p("the extra row, against nbdkit's 16 request threads in writethrough).")
p("Peak RSS: nbdkit's VmHWM, median over rounds.")
p("")
p("| configuration | burst MiB/s | burst p50 / p99 / max | sustained MiB/s | sustained p50 / p99 / max | peak RSS MiB |")
p("|---|---|---|---|---|---|")
for c in ("none", "throttle:8M:writethrough", "throttle:8M:writeback",
          "throttle:8M:writeback+throttle-writeback-threads=16", "rate:100M"):
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

print("\n".join(out))

# --- plot data: which CDF files exist, for latency.gp ----------------
last = {}
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
with open(os.path.join(res_dir, "plotcmd.gp"), "w") as f:
    f.write("set multiplot layout 1,%d\n" % max(len(cmds), 1))
    f.write("".join(cmds))
    f.write("unset multiplot\n")
