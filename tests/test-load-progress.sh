#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-load --progress against nbdkit memory: the lines of each
# phase carry a percentage that never goes down and reaches 100.0 on
# the phase's last line ("done"), and an ETA before it; a run by time
# shows its percentage grow, a run by size and --verify's read-back
# show theirs; and --progress changes nothing else (stdout, the exit
# status).
#
# Nothing here depends on the machine's speed: the lines of a run by
# time come from a timer every second of a 2.5 s run, and libev runs
# the timer of its first second before the run's end even when the
# process was held up past both; the other phases are only required
# to end with their "done" line.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"
set -u
: "${THROTTLE_LOAD:?THROTTLE_LOAD must point to the built throttle-load}"
LOAD=$THROTTLE_LOAD
requires $PY --version
requires_file "$LOAD"

# run NAME EXPECTED_RC ARGS...: throttle-load under a watchdog; output
# in $tmp/NAME.out and $tmp/NAME.err.
run ()
{
  local name=$1 want=$2 rc=0; shift 2
  timeout 60 "$LOAD" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  [ $rc != 124 ] || fail "$name: throttle-load hung (killed after 60 s)"
  [ $rc = "$want" ] ||
    { cat "$tmp/$name.err"; fail "$name: exit $rc, expected $want"; }
}

# phase NAME PHASE MIN [DURATION]: the PHASE lines of run NAME's stderr
# (at least MIN) never go down, only the last says done and it says
# 100.0%, every other has an ETA; with DURATION (a run by time) each
# line's percentage and ETA are those of its elapsed time.
phase ()
{
  $PY - "$tmp/$1.err" "$2" "$3" "${4:-0}" <<'PYEOF' ||
import re, sys
path, phase, least, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
line_re = re.compile(r"throttle-load: (\w+) +([0-9.]+)s +([0-9.]+)%  "
                     r"(done|ETA -|ETA ([0-9.]+)s) +([0-9.]+) MiB/s +[0-9]+ IOPS"
                     r"  in flight [0-9]+$")
rows = []
for line in open(path):
    line = line.rstrip("\n")
    if not line.startswith("throttle-load: " + phase + " "):
        continue
    m = line_re.match(line)
    assert m, "not a progress line: %r" % line
    rows.append((float(m.group(2)), float(m.group(3)), m.group(4), m.group(5)))
assert len(rows) >= least, "%d %s lines, expected %d at least" % (len(rows), phase, least)
pcts = [r[1] for r in rows]
assert pcts == sorted(pcts), "the percentage went down: %s" % pcts
assert all(0 <= p <= 100 for p in pcts), pcts
assert rows[-1][2] == "done" and pcts[-1] == 100.0, rows[-1]
for elapsed, pct, eta, eta_s in rows[:-1]:
    assert eta.startswith("ETA") and pct < 100, (elapsed, pct, eta)
    if duration:
        # Both printed to a tenth: within rounding of the truth.
        assert abs(pct - min(99.9, 100 * elapsed / duration)) <= 2.1, (elapsed, pct)
        assert abs(float(eta_s) - max(0, duration - elapsed)) <= 0.11, (elapsed, eta)
print("ok: %s: %d lines, %s" % (phase, len(rows), " ".join("%.1f%%" % p for p in pcts)))
PYEOF
    { cat "$tmp/$1.err"; fail "$1: the $2 lines"; }
}

start_nbdkit mem memory 64M

# By time, with --verify: the run's percentage grows with its time (a
# line below 100 before the last), then the read-back's lines.
run timed 0 --progress --verify -t 2.5 -r 20 --span 8M --unix "$tmp/mem.sock"
phase timed run 2 2.5
phase timed verify 1
# The run's lines all come before the read-back's.
awk '/^throttle-load: verify /{ v = 1 } /^throttle-load: run / && v { exit 1 }' \
  "$tmp/timed.err" || fail "timed: a run line after the verify lines"

# By size: the bytes that came back, to 100.0 and done.
run sized 0 --progress --verify -n 8M -b 64k --sequential --unix "$tmp/mem.sock"
phase sized run 1
phase sized verify 1

# Nothing written (reads only): the read-back has nothing to do and says
# so at once.
run reads 0 --progress --verify -n 1M -r 100 --unix "$tmp/mem.sock"
phase reads verify 1

# Without --progress, no such line; with it, stdout is the same JSON
# report.
run quiet 0 --json -n 1M --unix "$tmp/mem.sock"
! grep -q "^throttle-load: " "$tmp/quiet.err" ||
  { cat "$tmp/quiet.err"; fail "quiet: progress lines without --progress"; }
run json 0 --json --progress -n 1M --unix "$tmp/mem.sock"
$PY -c 'import json, sys; assert json.load(open(sys.argv[1]))["status"] == "ok"' \
  "$tmp/json.out" || { cat "$tmp/json.out"; fail "json: not the report"; }
phase json run 1

# The exit status is unchanged: a server that throws writes away fails
# --verify (1), after the read-back has shown its lines; a usage error
# is still 2.
start_nbdkit null null 64M
run null 1 --progress --verify -n 1M --unix "$tmp/null.sock"
grep -Eq "verify: [0-9]+ blocks of 512 bytes hold wrong data" "$tmp/null.err" ||
  { cat "$tmp/null.err"; fail "null: no verify error"; }
phase null verify 1
run usage 2 --progress -t 0 --unix "$tmp/mem.sock"

echo "$0: PASS"
