#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-load against real nbdkit servers: the numbers it reports add
# up, --verify catches wrong data, and every kind of failure (bad
# arguments, no server, failed requests, a server that dies or hangs)
# ends in a clear message and a non-zero exit, never a hang or a crash.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"
set -u
: "${THROTTLE_LOAD:?THROTTLE_LOAD must point to the built throttle-load}"
LOAD=$THROTTLE_LOAD

requires $PY --version
[ -x "$LOAD" ] || fail "$LOAD is not built"

# A failed check (fail_later) lets the others run; the test fails at
# exit.

# run NAME EXPECTED_RC ARGS...: throttle-load under a watchdog; output in
# $tmp/NAME.out and $tmp/NAME.err.  A hang is a failure.
run () {
  local name=$1 want=$2; shift 2
  local rc=0
  timeout 60 "$LOAD" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ $rc = 124 ]; then
    fail_later "$name: throttle-load hung (killed after 60 s)"; return 1
  fi
  if [ $rc -ge 128 ]; then
    fail_later "$name: throttle-load crashed (exit $rc)"; cat "$tmp/$name.err"; return 1
  fi
  if [ $rc != "$want" ]; then
    fail_later "$name: exit $rc, expected $want"; cat "$tmp/$name.err"; return 1
  fi
  return 0
}

# expect_err NAME REGEX: stderr of run NAME says what went wrong.
expect_err () {
  if grep -Eq -- "$2" "$tmp/$1.err"; then
    pass "$1: $(head -1 "$tmp/$1.err")"
  else
    fail_later "$1: stderr does not match /$2/:"; cat "$tmp/$1.err"
  fi
}

# check_json NAME PYTHON-ASSERTIONS: j is the parsed report.
check_json () {
  local name=$1 code=$2
  if $PY - "$tmp/$name.out" <<EOF
import json, sys
j = json.load(open(sys.argv[1]))
def lat_ok(l):
    assert l["p50"] <= l["p99"] <= l["p99.9"] <= l["max"], l
$code
EOF
  then pass "$name: JSON checks"
  else fail_later "$name: JSON checks"; cat "$tmp/$name.out"
  fi
}

# --- usage errors: exit 2 and name the option --------------------------
run noserver 2 -t 1 && expect_err noserver "exactly one server"
run qd0 2 -q 0 nbd://x && expect_err qd0 "queue-depth.*'0'"
run badsize 2 -b 4k:95,1X:5 nbd://x && expect_err badsize "block-size.*'1X'"
run odd 2 -b 1000 nbd://x && expect_err odd "multiple of 512"
run huge 2 -b 64M nbd://x && expect_err huge "32M"
run both 2 -t 1 -n 1M nbd://x && expect_err both "exclude"
run ratio 2 -r 101 nbd://x && expect_err ratio "read-ratio"
run unknown 2 --frobnicate nbd://x && expect_err unknown "frobnicate"
run twouri 2 nbd://x nbd://y && expect_err twouri "unexpected argument"
# Durations as nbdkit reads delays (lib/throttle-duration.h).
run durunit 2 -t 5m nbd://x && expect_err durunit "duration: '5m' is not a duration"
run durzero 2 -t 0ms nbd://x && expect_err durzero "duration: '0ms' is not a duration"
run timeoutunit 2 --timeout 1h nbd://x && expect_err timeoutunit "timeout: '1h' is not"
# Any seed the tool prints is taken (64 bits), nothing more.
run seedbig 2 --seed 18446744073709551616 nbd://x &&
  expect_err seedbig "seed: '18446744073709551616' is not a whole number between 0 and 18446744073709551615"
run seedneg 2 --seed -1 nbd://x && expect_err seedneg "seed: '-1' is not"

# --- no server ----------------------------------------------------------
run nosock 1 -t 1 --unix "$tmp/nothing.sock" &&
  expect_err nosock "cannot connect.*No such file"
run refused 1 -t 1 nbd://127.0.0.1:1 && expect_err refused "cannot connect.*refused"
run scheme 1 -t 1 "bogus://x" && expect_err scheme "cannot connect"

# --- a working server: the report adds up -------------------------------
start_nbdkit mem memory 256M
uri="nbd+unix:///?socket=$tmp/mem.sock"

if run mix 0 --json -t 1 -c 4 -q 8 -b 4k:90,1M:10 -r 30 "$uri"; then
  check_json mix '
assert j["status"] == "ok"
assert j["config"]["connections"] == 4 and j["config"]["queue_depth"] == 8
assert j["export_size_bytes"] == 256 << 20
assert 0.9 < j["elapsed_seconds"] < 5, j["elapsed_seconds"]
assert j["ops"] > 100
assert j["read_ops"] > 0 and j["write_ops"] > 0
assert j["read_bytes"] + j["write_bytes"] == j["bytes"]
assert j["read_ops"] + j["write_ops"] == j["ops"]
c = j["connections"]
assert len(c) == 4
assert sum(x["bytes"] for x in c) == j["bytes"]
assert sum(x["ops"] for x in c) == j["ops"]
assert all(x["ops"] > 0 for x in c)
# Jain: in [1/n, 1], and recomputable from the per-connection bytes
b = [x["bytes"] for x in c]
jain = sum(b) ** 2 / (len(b) * sum(x * x for x in b))
assert abs(j["fairness"] - jain) < 1e-4 and 0.25 <= j["fairness"] <= 1
t = j["throughput_bytes_per_second"]
assert abs(t - j["bytes"] / j["elapsed_seconds"]) < 0.01 * t
assert all(abs(x["throughput_bytes_per_second"] - x["bytes"] / j["elapsed_seconds"])
           < 0.01 * t for x in c)
assert j["config"]["read_percent"] == 30 and j["config"]["duration_seconds"] == 1
assert j["config"]["span_bytes"] is None and j["config"]["offset_bytes"] == 0
assert j["verify"] == {"enabled": False, "bytes": None, "mismatched_blocks": None}
lat_ok(j["latency_us"]); lat_ok(j["read_latency_us"]); lat_ok(j["write_latency_us"])
assert j["latency_us"]["count"] == j["ops"]
s = {x["size_bytes"]: x["latency_us"] for x in j["by_size"]}
assert set(s) == {4096, 1 << 20}
assert s[4096]["count"] + s[1 << 20]["count"] == j["ops"]
assert s[1 << 20]["count"] > 0
assert j["largest_size_bytes"] == 1 << 20
assert j["largest_size_max_latency_us"] == s[1 << 20]["max"]
assert j["latency_us"]["max"] == max(s[4096]["max"], s[1 << 20]["max"])
# 10% of requests are 1M: the bytes are dominated by them
assert s[1 << 20]["count"] * (1 << 20) + s[4096]["count"] * 4096 == j["bytes"]
'
fi

# The seed the report prints replays the run: a clock seed (about
# 1.8e18, beyond 32 bits) given back to --seed makes the same choices.
# One connection and --bytes, so that the requests drawn do not depend
# on timing: the counts of reads, writes and sizes are then the
# seed's.
if run seedclock 0 --json -n 32M -c 1 -b 4k:50,64k:50 -r 50 "$uri"; then
  seed=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["config"]["seed"])' \
           "$tmp/seedclock.out")
  if run seedreplay 0 --json -n 32M -c 1 -b 4k:50,64k:50 -r 50 --seed "$seed" "$uri"; then
    if $PY - "$tmp/seedclock.out" "$tmp/seedreplay.out" <<'EOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["config"]["seed"] == b["config"]["seed"], (a["config"], b["config"])
def counts(j):
    return (j["ops"], j["read_ops"], j["write_ops"],
            [s["latency_us"]["count"] for s in j["by_size"]])
assert counts(a) == counts(b), (counts(a), counts(b))
print("seed %d: %s both times" % (a["config"]["seed"], counts(a)))
EOF
    then pass "seedreplay: --seed $seed repeats the run's choices"
    else fail_later "seedreplay: --seed $seed did not repeat the run"
    fi
  fi
  run seedhuman 0 -t 0.2 --seed "$seed" "$uri" &&
    grep -qx "seed $seed (--seed $seed repeats the run's choices)" "$tmp/seedhuman.out" &&
    pass "seedhuman: the table prints the seed" ||
    { fail_later "seedhuman: no seed line in the table"; cat "$tmp/seedhuman.out"; }
fi

# SIGINT and SIGTERM end the run early: the report says so, and the
# exit status is the signal's (128 + N).  The signal is sent once the
# run has begun (its first --progress line), never after a guessed
# time.
interrupt () {
  local name=$1 sig=$2 want=$3 rc=0 i; shift 3
  "$LOAD" --progress -t 60 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local lpid=$!
  for i in $(seq 300); do
    grep -q '^throttle-load: run ' "$tmp/$name.err" && break
    sleep 0.1
  done
  kill -"$sig" $lpid
  # The 60 s run must end well before its time.
  for i in $(seq 300); do kill -0 $lpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $lpid 2>/dev/null; then
    kill -9 $lpid; fail_later "$name: still running 30 s after SIG$sig"; return 1
  fi
  wait $lpid || rc=$?
  [ $rc = "$want" ] ||
    { fail_later "$name: exit $rc after SIG$sig, expected $want"; cat "$tmp/$name.err"; return 1; }
  pass "$name: SIG$sig ends the run with exit $rc"
}
if interrupt intjson INT 130 --json "$uri"; then
  check_json intjson '
assert j["status"] == "interrupted" and j["interrupted_by"] == "SIGINT", j["status"]
assert "error" not in j
assert 0 < j["elapsed_seconds"] < 60 and j["ops"] > 0, j["elapsed_seconds"]
'
fi
interrupt intterm TERM 143 "$uri" &&
  grep -q '^INTERRUPTED by SIGTERM: the run ended early' "$tmp/intterm.out" &&
  grep -q '^fairness (Jain)' "$tmp/intterm.out" &&
  pass "intterm: the table says the run was interrupted" ||
  { fail_later "intterm: the table does not say INTERRUPTED"; cat "$tmp/intterm.out"; }
# A run that ends by itself says nothing of the kind.
grep -q '"interrupted_by": null' "$tmp/mix.out" ||
  fail_later "mix: a run that was not interrupted does not say null"

# --bytes: stops after the amount, overshooting by at most what was in flight.
if run bytes 0 --json -n 64M -c 2 -q 4 -b 64k --sequential "$uri"; then
  check_json bytes '
assert j["status"] == "ok"
assert 64 << 20 <= j["bytes"] <= (64 << 20) + 2 * 4 * (64 << 10), j["bytes"]
assert j["config"]["bytes"] == 64 << 20 and j["config"]["pattern"] == "sequential"
assert "duration_seconds" not in j["config"]
# Writes only: the reads measured nothing, which is null, not 0.
r = j["read_latency_us"]
assert r["count"] == 0 and j["read_ops"] == 0, r
assert all(r[k] is None for k in ("mean", "p50", "p99", "p99.9", "max")), r
lat_ok(j["write_latency_us"])
'
fi

# The human table.
if run table 0 -t 0.5 -c 2 "$uri"; then
  if grep -q "fairness (Jain)" "$tmp/table.out" &&
     grep -q "^throughput .* MiB/s" "$tmp/table.out" &&
     grep -Eq "^  all +[0-9]+" "$tmp/table.out"; then
    pass "table: has throughput, latency and fairness"
  else
    fail_later "table: missing lines"; cat "$tmp/table.out"
  fi
fi

# --histogram: a CDF that ends at 1 and --progress lines.
if run hist 0 -t 1.5 --progress --histogram "$tmp/lat.dat" "$uri"; then
  if tail -1 "$tmp/lat.dat" | awk '{ exit !($3 == 1.0) }' &&
     [ "$(grep -vc '^#' "$tmp/lat.dat")" -gt 3 ]; then
    pass "hist: CDF written"
  else
    fail_later "hist: bad CDF"; cat "$tmp/lat.dat"
  fi
  expect_err hist "throttle-load: run +1\.[0-9]s +[0-9.]+%  ETA .*MiB/s.*IOPS"
fi

# --verify passes on a server that keeps data ...
if run verify 0 --json --verify -t 1 -c 2 -q 8 -b 4k:80,64k:20 -r 50 \
     --span 16M "$uri"; then
  check_json verify '
assert j["status"] == "ok"
v = j["verify"]
assert v["enabled"] and v["mismatched_blocks"] == 0
# the read-back pass alone covers every byte written at least once
assert v["bytes"] > 0
'
fi
run verifyseq 0 --verify -n 32M -b 1M --sequential -c 2 "$uri" &&
  pass "verifyseq: sequential write + read-back"

# --control: what the throttle did, read from its control socket; the
# numbers must agree with what the client sent.
start_nbdkit thr --filter="$THROTTLE_FILTER" memory 64M throttle-capacity=128K \
  throttle-control="$tmp/thr.ctl" throttle-rt=off
if run control 0 --json -t 1s -c 2 -q 8 -b 64k --control "$tmp/thr.ctl" \
     --unix "$tmp/thr.sock"; then
  check_json control '
assert j["config"]["duration_seconds"] == 1, j["config"]
t = j["throttle"]["exports"][0]
assert t["name"] == "" and t["capacity"] == 131072, t
assert t["peak"] <= 131072 and t["peak"] > 0, t
# A fresh server: everything it admitted is what this run wrote.
assert t["admitted"] == j["write_ops"], (t, j["write_ops"])
assert t["charged"] == j["write_bytes"], (t, j["write_bytes"])
assert t["in_flight"] == 0, t
'
fi
run controlhuman 0 -t 0.5 --control "$tmp/thr.ctl" --unix "$tmp/thr.sock" &&
  grep -q '^  export "": capacity 131072, peak in flight' "$tmp/controlhuman.out" &&
  pass "control: the table shows what the throttle did" ||
  fail_later "control: no throttle section in the table"
# An export name with a blank, a quote and a backslash is read whole
# from the reply (it was once cut at the first quote), while a client
# holds its budget open.
if $PY -c 'import nbd' 2>/dev/null; then
  hold_exports "$tmp/thr.sock" odd 'a "b\c'
  run controlname 0 --json -t 0.3 --control "$tmp/thr.ctl" \
      --unix "$tmp/thr.sock" &&
    check_json controlname '
names = [e["name"] for e in j["throttle"]["exports"]]
assert sorted(names) == ["", "a \"b\\c"], names
'
  run controlnamehuman 0 -t 0.3 --control "$tmp/thr.ctl" \
      --unix "$tmp/thr.sock" &&
    grep -qF '  export "a \"b\\c": capacity 131072, peak in flight 4096' \
      "$tmp/controlnamehuman.out" &&
    pass "control: an odd export name is shown whole" ||
    { fail_later "control: the odd export name"; cat "$tmp/controlnamehuman.out"; }
  kill $held; wait $held 2>/dev/null || :
else
  echo "$0: skipped the odd export name: Debian's python3-libnbd is not installed"
fi
# A --control that is not the throttle's socket is refused before the
# run, in one line: asked after a run of 120 s, run's 60 s watchdog
# would end it as hung.
run controlbad 1 -t 120 --control "$tmp/nonexistent.ctl" --unix "$tmp/thr.sock" &&
  expect_err controlbad "^throttle-load: --control .*nonexistent.ctl: No such file" &&
  { [ "$(wc -l < "$tmp/controlbad.err")" = 1 ] && [ ! -s "$tmp/controlbad.out" ] ||
      fail_later "controlbad: not one line before the run"; }
run controlfile 1 -t 120 --control "$tmp/lat.dat" --unix "$tmp/thr.sock" &&
  expect_err controlfile "^throttle-load: --control .*lat.dat: not a socket$" &&
  { [ ! -s "$tmp/controlfile.out" ] || fail_later "controlfile: the run ran"; }

# ... and fails on one that throws writes away.
start_nbdkit null null 64M
run verifynull 1 --verify -t 0.5 --unix "$tmp/null.sock" &&
  expect_err verifynull "verify: [0-9]+ blocks of 512 bytes hold wrong data"

# A read-only export without -r 100.
start_nbdkit ro -r memory 64M
run ro 1 -t 0.5 --unix "$tmp/ro.sock" && expect_err ro "read-only"

# --- the server fails requests -----------------------------------------
start_nbdkit err --filter=error memory 64M error-pwrite-rate=0.01 error-pwrite=EIO
run err 1 -t 5 -q 8 --unix "$tmp/err.sock" &&
  expect_err err "server failed a write of 4096 bytes at offset [0-9]+: Input/output error"
run errjson 1 --json -t 5 -q 8 --unix "$tmp/err.sock" &&
  check_json errjson '
assert j["status"] == "error" and "Input/output error" in j["error"]
'
# A run that never connected measured nothing: null, not 0.
run nothingjson 1 --json -t 1 --unix "$tmp/nothing.sock" &&
  check_json nothingjson '
assert j["status"] == "error" and "cannot connect" in j["error"]
for k in ("elapsed_seconds", "export_size_bytes", "throughput_bytes_per_second",
          "iops", "fairness", "largest_size_max_latency_us"):
    assert j[k] is None, (k, j[k])
assert j["latency_us"]["count"] == 0 and j["latency_us"]["max"] is None
'

# --- the server dies mid-run -------------------------------------------
start_nbdkit dies memory 64M
dies_pid=$pid
( sleep 1; kill -9 "$dies_pid" ) &
killer=$!
run dies 1 -t 20 -c 2 -q 8 --unix "$tmp/dies.sock" &&
  expect_err dies "connection was lost"
wait $killer

# --- the server hangs: --timeout turns it into an error ----------------
start_nbdkit hangs memory 64M
hang_pid=$pid
( sleep 1; kill -STOP "$hang_pid" ) &
killer=$!
run hangs 1 -t 20 -q 8 --timeout 2 --unix "$tmp/hangs.sock" &&
  expect_err hangs "no reply from the server for 2 seconds"
wait $killer
kill -CONT "$hang_pid"

echo "$0: finished"
