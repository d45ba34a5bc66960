# SPDX-License-Identifier: BSD-3-Clause
# Shared helpers for the integration tests (bash).

set -e
set -o pipefail

: "${NBDKIT:=nbdkit}"
# The system python has the nbd module; a python earlier on PATH may not.
PY=/usr/bin/python3
srcdir="${abs_srcdir:-$(cd "$(dirname "$0")" && pwd)}"
# The tests' python helpers (throttle_control) import from here.
export PYTHONPATH="$srcdir${PYTHONPATH:+:$PYTHONPATH}"

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

# requires_root WHY: a test that cannot run without root skips (CI
# runs as root, so there it runs).
requires_root ()
{
  if [ "$(id -u)" != 0 ]; then
    echo "$0: SKIP: needs root ($*)"
    exit 77
  fi
}

fail ()
{
  echo "$0: FAIL: $*" >&2
  exit 1
}

# fail_later MSG: a failed check after which the test goes on with its
# other checks; the test still fails at exit, with the servers' logs.
_failures=0
fail_later ()
{
  echo "$0: FAIL: $*" >&2
  _failures=$((_failures + 1))
}

pass ()
{
  echo "ok: $*"
}

# A scratch directory removed at exit, and nbdkit servers killed at exit.
tmp=$(mktemp -d /var/tmp/throttle-test.XXXXXX)
_pids=()
_at_exit=()
# at_exit COMMAND: eval'd at exit, after the servers are killed.
at_exit ()
{
  _at_exit+=("$1")
}
_cleanup ()
{
  local rc=$? p
  for p in "${_pids[@]}"; do kill -9 "$p" 2>/dev/null || :; done
  for p in "${_at_exit[@]}"; do eval "$p" || :; done
  if [ "$_failures" != 0 ] && { [ "$rc" = 0 ] || [ "$rc" = 77 ]; }; then
    echo "$0: FAIL: $_failures check(s) failed (above)" >&2
    rc=1
  fi
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
  local sock=$tmp/$name.sock i=0
  rm -f "$sock"
  "$NBDKIT" -f -v -U "$sock" "$@" >"$tmp/$name.log" 2>&1 &
  pid=$!
  _pids+=("$pid")
  wait_for_socket "$sock" "$pid" || i=$?
  case $i in
    1) cat "$tmp/$name.log"; fail "nbdkit $name did not start" ;;
    2) fail "nbdkit $name: no socket after 10 s" ;;
  esac
  uri="nbd+unix:///?socket=$sock"
}

# start_refused EXPECT ARGS...: nbdkit with the filter over the memory
# plugin refuses to start with ARGS, with exactly one error line, which
# says EXPECT (a grep pattern): every error is one line of the filter's,
# naming the parameter (plugin/throttle/params/throttle-params.h); the filter
# calls none of nbdkit's parsers, which would log a line of their own.
start_refused ()
{
  local expect=$1 rc=0 n; shift
  "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M "$@" --run true \
    >"$tmp/out" 2>&1 || rc=$?
  [ $rc != 0 ] || fail "nbdkit started with $*"
  [ $rc -lt 128 ] || { cat "$tmp/out"; fail "nbdkit crashed (exit $rc) with $*"; }
  n=$(grep -c 'error:' "$tmp/out")
  [ "$n" = 1 ] ||
    { cat "$tmp/out"; fail "$*: $n error lines, not 1"; }
  grep 'error:' "$tmp/out" | grep -q -- "$expect" ||
    { cat "$tmp/out"; fail "$*: the error line does not say '$expect'"; }
  echo "ok: refused $*: $(grep error "$tmp/out")"
}

# start_refused_line LINE ARGS...: as start_refused, and the one error
# line is exactly LINE after nbdkit's "error: " (its prefix before that
# differs between nbdkit releases).
start_refused_line ()
{
  local line=$1 got
  start_refused "" "${@:2}"
  got=$(grep 'error:' "$tmp/out")
  got=${got#*error: }
  [ "$got" = "$line" ] ||
    { cat "$tmp/out"; fail "${*:2}: the error line is not exactly: $line"; }
}

# alive PID: running and not a zombie.
alive ()
{
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ]
}

gone ()
{
  ! alive "$1"
}

# wait_until SECS PID COMMAND...: run COMMAND every 0.1 s until it
# succeeds.  Returns 1 once PID (unless "") is gone without COMMAND
# having succeeded, 2 after SECS seconds.
wait_until ()
{
  local secs=$1 p=$2 i
  shift 2
  for i in $(seq $((secs * 10))); do
    "$@" && return 0
    if [ -n "$p" ] && ! alive "$p"; then
      "$@" && return 0
      return 1
    fi
    sleep 0.1
  done
  "$@" && return 0
  return 2
}

# wait_for_socket SOCK [PID] [SECS]: wait until SOCK is a socket, for
# at most SECS (10) seconds and no longer than PID (if given) lives.
# Returns as wait_until does.
wait_for_socket ()
{
  wait_until "${3:-10}" "${2:-}" test -S "$1"
}

# wait_exit PID [SECS]: fail unless PID exits within SECS (5).
wait_exit ()
{
  local p=$1 secs=${2:-5}
  wait_until "$secs" "" gone "$p" ||
    fail "nbdkit (pid $p) still running $secs s after SIGTERM"
  wait "$p" 2>/dev/null || :
}

# stop_nbdkit PID [SECS]: SIGTERM, and fail unless it exits in SECS (5).
stop_nbdkit ()
{
  kill -TERM "$1" || fail "nbdkit (pid $1) had exited before SIGTERM"
  wait_exit "$@"
}

# ctl_send CTL LINE...: send each line to the control socket CTL, print
# each reply.
ctl_send ()
{
  $PY "$srcdir/throttle_control.py" send "$@"
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
# THROTTLE_ALLOW_NO_WRITEBACK=1, which skips the test instead.
requires_writeback ()
{
  if ! "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
       throttle-mode=writeback --run true >"$tmp/wbprobe.log" 2>&1; then
    cat "$tmp/wbprobe.log"
    if [ "${THROTTLE_ALLOW_NO_WRITEBACK:-}" = 1 ]; then
      echo "$0: SKIP: nbdkit refused throttle-mode=writeback (THROTTLE_ALLOW_NO_WRITEBACK=1 allows that)"
      exit 77
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
  $PY "$srcdir/throttle_control.py" hold "$sock" "$tmp/$tag.ready" "$@" &
  held=$!
  _pids+=("$held")
  for i in $(seq 600); do
    [ -e "$tmp/$tag.ready" ] && return 0
    kill -0 "$held" 2>/dev/null || break
    sleep 0.1
  done
  fail "hold_exports $tag: the connections did not open in 60 s"
}

# Capability probes: each tries the real thing in a child, so that the
# test's own shell stays as it was.  0 where this machine grants it.
probe_io_flusher ()     # prctl(PR_SET_IO_FLUSHER)
{
  $PY -c 'import ctypes, sys
sys.exit(ctypes.CDLL(None, use_errno=True).prctl(57, 1, 0, 0, 0) != 0)' 2>/dev/null
}
probe_oom_protect ()    # oom_score_adj -1000
{
  sh -c 'echo -1000 > /proc/self/oom_score_adj' 2>/dev/null
}
probe_rt ()             # SCHED_FIFO, with real-time throttling on
{
  [ "$(cat /proc/sys/kernel/sched_rt_runtime_us 2>/dev/null)" != -1 ] &&
    chrt -f 1 true 2>/dev/null
}
probe_capsh_drop ()     # root, with capsh to drop capabilities
{
  [ "$(id -u)" = 0 ] && command -v capsh >/dev/null &&
    capsh --drop=cap_sys_nice -- -c true 2>/dev/null
}
# yes_no COMMAND...: "yes" if COMMAND succeeds, else "no".
yes_no ()
{
  if "$@"; then echo yes; else echo no; fi
}
