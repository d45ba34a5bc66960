# Shared helpers for the integration tests (bash).

set -e
set -o pipefail

: "${NBDKIT:=nbdkit}"
# The system python has the nbd module; a python earlier on PATH may not.
PY=/usr/bin/python3
srcdir="${abs_srcdir:-$(cd "$(dirname "$0")" && pwd)}"

requires ()
{
  if ! "$@" >/dev/null 2>&1; then
    echo "$0: SKIP: missing requirement: $*"
    exit 77
  fi
}

requires_file ()
{
  if [ ! -e "$1" ]; then
    echo "$0: SKIP: $1 has not been built"
    exit 77
  fi
}

fail ()
{
  echo "$0: FAIL: $*" >&2
  exit 1
}

# A scratch directory removed at exit, and nbdkit servers killed at exit.
tmp=$(mktemp -d /var/tmp/throttle-test.XXXXXX)
_pids=()
_cleanup ()
{
  local rc=$? p
  for p in "${_pids[@]}"; do kill -9 "$p" 2>/dev/null || :; done
  if [ -n "${THROTTLE_SANITIZER_LOGS:-}" ] &&
     ! "$srcdir/sanitizer-reports.sh" "$THROTTLE_SANITIZER_LOGS" >&2; then
    echo "$0: FAIL: a sanitizer reported on our code (above)" >&2
    rc=1
  fi
  # A failed test shows the end of each server's log: the scratch
  # directory goes, and a CI run leaves nothing else to read.
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    for p in "$tmp"/*.log; do
      [ -f "$p" ] || continue
      echo "--- last lines of $(basename "$p") ---" >&2
      tail -n 25 "$p" >&2
    done
  fi
  rm -rf "$tmp"
  exit $rc
}
trap _cleanup EXIT
# with-timeout.sh ends a hung test with SIGTERM: a failure, with the
# servers' logs.
trap 'echo "$0: FAIL: stopped by SIGTERM (timed out?)" >&2; exit 124' TERM

# In a sanitizer build $NBDKIT is nbdkit-sanitized.sh, which writes
# every report under THROTTLE_SANITIZER_LOGS: give each test its own
# directory there, so that a report fails the test that caused it.
if [ -n "${THROTTLE_SANITIZER_LOGS:-}" ]; then
  THROTTLE_SANITIZER_LOGS=$THROTTLE_SANITIZER_LOGS/$(basename "$0" .sh)
  rm -rf "$THROTTLE_SANITIZER_LOGS"
  export THROTTLE_SANITIZER_LOGS
fi

# start_nbdkit NAME ARGS...: run nbdkit in the foreground of a background
# job on $tmp/NAME.sock, logging to $tmp/NAME.log.  Sets $pid and $uri.
start_nbdkit ()
{
  local name=$1; shift
  local sock=$tmp/$name.sock i
  rm -f "$sock"
  "$NBDKIT" -f -v -U "$sock" "$@" >"$tmp/$name.log" 2>&1 &
  pid=$!
  _pids+=("$pid")
  for i in $(seq 100); do
    [ -S "$sock" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$tmp/$name.log"
      fail "nbdkit $name did not start"
    fi
    sleep 0.1
  done
  [ -S "$sock" ] || fail "nbdkit $name: no socket after 10 s"
  uri="nbd+unix:///?socket=$sock"
}

# stop_nbdkit PID [SECS]: SIGTERM, and fail unless it exits in SECS (5).
stop_nbdkit ()
{
  local p=$1 secs=${2:-5} i
  kill -TERM "$p"
  for i in $(seq $((secs * 10))); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || :; return 0; }
    sleep 0.1
  done
  fail "nbdkit (pid $p) still running $secs s after SIGTERM"
}

# summary LOG FIELD: a field of the filter's unload summary.
summary ()
{
  sed -n "s/.*throttle: summary .* $2=\([0-9.]*\).*/\1/p" "$1" | tail -1
}

# statefield FILE FIELD: a field written by the test plugin at unload.
statefield ()
{
  sed -n "s/^$2=//p" "$1"
}

# The writeback cases must run: a filter that refuses
# throttle-mode=writeback fails the test unless
# THROTTLE_ALLOW_NO_WRITEBACK=1, which ends the test here instead.
requires_writeback ()
{
  if ! "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
       throttle-mode=writeback --run true >"$tmp/wbprobe.log" 2>&1; then
    cat "$tmp/wbprobe.log"
    if [ "${THROTTLE_ALLOW_NO_WRITEBACK:-}" = 1 ]; then
      echo "$0: the writeback case could not run (throttle-mode=writeback refused); allowed by THROTTLE_ALLOW_NO_WRITEBACK=1"
      exit 0
    fi
    fail "the writeback case could not run: nbdkit refused throttle-mode=writeback"
  fi
}

# hold_exports SOCK TAG NAME...: one connection per NAME to the NBD
# socket SOCK, opened (each writes 4K) and kept open in the background
# until killed; returns once all are open, with the holder's pid in
# $held.  A named export's budget lives only while it has connections.
hold_exports ()
{
  local sock=$1 tag=$2 i
  shift 2
  $PY "$srcdir/control-client.py" hold "$sock" "$tmp/$tag.ready" "$@" &
  held=$!
  _pids+=("$held")
  for i in $(seq 600); do
    [ -e "$tmp/$tag.ready" ] && return 0
    kill -0 "$held" 2>/dev/null || break
    sleep 0.1
  done
  fail "hold_exports $tag: the connections did not open in 60 s"
}

# debug_json PATTERN LOG: the JSON after PATTERN (e.g. "throttle: stats ")
# on each matching line of an nbdkit debug log, as the filter wrote it.
# nbdkit 1.32 logs debug text as it is; later releases C-quote it (a
# backslash doubled, other bytes as \xNN), which a JSON string's own
# escapes do not survive: such a line is unquoted first.
debug_json ()
{
  grep -F -- "$1" "$2" | sed "s/^.*$1//" | $PY -c '
import codecs, json, sys
for line in sys.stdin:
    line = line.rstrip("\n")
    try:
        json.loads(line)
    except ValueError:
        line = codecs.escape_decode(line.encode())[0].decode("utf-8")
    print(line)'
}
