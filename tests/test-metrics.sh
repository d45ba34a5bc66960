#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The metrics a monitor scrapes, read with both of Python's parsers
# (Debian's python3-prometheus-client: OpenMetrics, and the Prometheus
# text format): the control command "metrics",
# throttle-ctl metrics and throttle-metrics-file agree with the JSON
# stats under a known load, and with the load itself; export names
# that need escaping are escaped; the file appears at start, is
# rewritten, and holds the final numbers after exit; the summary is
# printed at exit without -v; misuse of the parameters is refused.
# The live part is tests/metrics-check.py.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$THROTTLE_CTL"
requires $PY -c 'import nbd'
requires $PY -c 'import prometheus_client.parser, prometheus_client.openmetrics.parser'

check=$srcdir/metrics-check.py
# Ordinary throttling: no guard's warning in the logs read below.
quiet="throttle-swap=off"

# Misuse, each refused with one error line naming the parameter.
mkdir "$tmp/dir"
start_refused "throttle-metrics-interval=5: no throttle-metrics-file" \
  throttle-metrics-interval=5
start_refused "throttle-metrics-interval=0: expected a number of seconds" \
  throttle-metrics-file="$tmp/m" throttle-metrics-interval=0
start_refused "throttle-metrics-interval=abc: expected" \
  throttle-metrics-file="$tmp/m" throttle-metrics-interval=abc
start_refused "throttle-metrics-file=: expected the path of a file" \
  throttle-metrics-file=
start_refused "throttle-metrics-file=$tmp/dir/: expected the path of a file" \
  throttle-metrics-file="$tmp/dir/"
start_refused "creating a temporary file beside it: No such file" \
  throttle-metrics-file="$tmp/nosuch/m.prom"
start_refused "$tmp/dir: renaming the new file over it: Is a directory" \
  throttle-metrics-file="$tmp/dir"
left=$(find "$tmp" -name '.*.??????')
[ -z "$left" ] || fail "a refused start left temporary files: $left"
! grep -q "summary" "$tmp/out" ||
  fail "a refused start printed the summary"
echo "ok: a refused start prints no summary and leaves no file"

# The names do not follow the metric, so that a dashboard is written
# once: the same families under every metric, the unit in the info
# metric's label.
families ()
{
  grep '^# TYPE ' "$1" | cut -d' ' -f3,4
}
for m in bytes pages requests "$TEST_METRIC"; do
  out=$tmp/metric-$(basename "$m").out
  # shellcheck disable=SC2086
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M throttle-metric="$m" \
    throttle-control="$tmp/m.ctl" $quiet \
    --run "'$THROTTLE_CTL' '$tmp/m.ctl' metrics" >"$out" 2>&1 ||
    { cat "$out"; fail "throttle-ctl metrics under throttle-metric=$m"; }
  case $m in
    bytes|pages|requests) unit=$m ;;
    *) unit=units ;;
  esac
  grep -qxF "nbdkit_throttle_info{metric=\"$m\",unit=\"$unit\"} 1" "$out" ||
    { cat "$out"; fail "throttle-metric=$m: the info metric does not say unit=\"$unit\""; }
  grep -Eq '^nbdkit_throttle_capacity_units\{export=""\} [1-9][0-9]*$' "$out" ||
    { cat "$out"; fail "throttle-metric=$m: no nbdkit_throttle_capacity_units"; }
  [ "$(families "$out")" = "$(families "$tmp/metric-bytes.out")" ] ||
    { diff <(families "$tmp/metric-bytes.out") <(families "$out");
      fail "throttle-metric=$m: the families differ from those under bytes"; }
done
echo "ok: the same families under every metric, the unit in nbdkit_throttle_info"

# A server that refuses the command (one without it): its error line,
# whole, on stderr, and status 1.
$PY - "$tmp/old.ctl" >"$tmp/old.log" 2>&1 <<'PYEOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
c, _ = s.accept()
c.recv(100)
c.sendall(b'{"error":"unknown command \\"metrics\\": try help"}\n')
c.close()
PYEOF
pid=$!
_pids+=("$pid")
wait_for_socket "$tmp/old.ctl" "$pid" || fail "no fake control socket"
r=0
"$THROTTLE_CTL" "$tmp/old.ctl" metrics >"$tmp/old.out" 2>&1 || r=$?
[ $r = 1 ] && grep -qF 'the server refused: {"error":"unknown command \"metrics\": try help"}' \
  "$tmp/old.out" ||
  { cat "$tmp/old.out"; fail "a refusal of metrics: exit $r"; }
echo "ok: a refusal is said whole: $(cat "$tmp/old.out")"

# A write that fails while the server runs is logged once, and the
# next interval tries again: the directory removed, then made again.
# (50ms: a duration with its unit, as every duration the filter reads.)
mkdir "$tmp/mdir"
# shellcheck disable=SC2086
"$NBDKIT" -f -U "$tmp/gone.sock" --filter="$THROTTLE_FILTER" memory 1M \
  throttle-metrics-file="$tmp/mdir/m.prom" throttle-metrics-interval=50ms \
  $quiet >"$tmp/gone.log" 2>&1 &
pid=$!
_pids+=("$pid")
wait_for_socket "$tmp/gone.sock" "$pid" || fail "no NBD socket"
# Renamed away at once (rm -rf races the server's next temporary file
# and can fail "Directory not empty"); removed when the server is gone.
mv "$tmp/mdir" "$tmp/mdir.gone"
failed_write ()
{
  grep -c "throttle-metrics-file=$tmp/mdir/m.prom: creating a temporary file beside it: No such file or directory: it keeps its last metrics" "$tmp/gone.log"
}
wait_until 30 "$pid" failed_write >/dev/null ||
  { cat "$tmp/gone.log"; fail "no error when the directory went away"; }
mkdir "$tmp/mdir"
wait_until 30 "$pid" test -s "$tmp/mdir/m.prom" ||
  fail "the file was not written again once the directory was back"
stop_nbdkit "$pid"
[ "$(failed_write)" = 1 ] ||
  { cat "$tmp/gone.log"; fail "the failed write was logged $(failed_write) times, not once"; }
echo "ok: a failed write is logged once, and the file comes back"

# Writeback's pool and queue have families of their own.
requires_writeback
start_nbdkit wb --filter="$THROTTLE_FILTER" memory 64M throttle-mode=writeback \
  throttle-control="$tmp/wb.ctl"
$PY "$check" writeback "$tmp/wb.sock" "$tmp/wb.ctl" ||
  fail "the writeback metrics (see above)"
stop_nbdkit "$pid"

# The live test, without -v: the summary at exit must not need it.
# shellcheck disable=SC2086
"$NBDKIT" -f -U "$tmp/live.sock" --filter="$THROTTLE_FILTER" memory 64M \
  throttle-control="$tmp/ctl" throttle-metrics-file="$tmp/m.prom" \
  throttle-metrics-interval=0.2 $quiet >"$tmp/live.log" 2>&1 &
pid=$!
_pids+=("$pid")
wait_for_socket "$tmp/ctl" "$pid" || fail "no control socket"
wait_for_socket "$tmp/live.sock" "$pid" || fail "no NBD socket"
$PY "$check" live "$tmp/live.sock" "$tmp/ctl" "$tmp/m.prom" ||
  fail "the live metrics test failed (see above)"
stop_nbdkit "$pid"

grep -q "debug:" "$tmp/live.log" && fail "the server logged debug lines: was -v given?"
line=$(grep '^nbdkit: throttle: summary export="" ' "$tmp/live.log") ||
  { cat "$tmp/live.log"; fail "no summary line at exit without -v"; }
echo "ok: at exit without -v: $line"
charged=$(summary "$tmp/live.log" charged)
[ "$charged" = $((16 * 65536)) ] ||
  fail "the summary says $charged bytes charged, not $((16 * 65536))"
$PY "$check" final "$tmp/m.prom" "$charged" ||
  fail "the metrics file after exit (see above)"
left=$(find "$tmp" -name '.*.??????')
[ -z "$left" ] || fail "temporary files left: $left"
