#!/usr/bin/env bash
# throttle-mode=writeback against a real nbdkit: each promise of
# "WRITEBACK MODE" in nbdkit-throttle-filter(1) is asserted here, with
# nbdkit's delay, pause and error filters below the throttle to make
# the backend slow, stopped or failing, and the file plugin so that the
# test can look at what the backend really has.

set -e
set -o pipefail

: "${NBDKIT:=nbdkit}"
PY=/usr/bin/python3          # has the nbd module; a pyenv python may not
srcdir="${abs_srcdir:-$(cd "$(dirname "$0")" && pwd)}"
check="$srcdir/writeback-check.py"
filter="${THROTTLE_FILTER:-}"

fail () { echo "$0: FAIL: $*" >&2; exit 1; }
skip () { echo "$0: SKIP: $*"; exit 77; }

[ -n "$filter" ] && [ -e "$filter" ] ||
  skip "THROTTLE_FILTER (the built filter) is not set or not built"
"$NBDKIT" --version >/dev/null 2>&1 || skip "no nbdkit"
$PY -c 'import nbd' 2>/dev/null || skip "$PY has no nbd module (python3-libnbd)"
for f in delay pause error noparallel; do
  "$NBDKIT" --filter=$f null --dump-plugin >/dev/null 2>&1 ||
    skip "nbdkit has no $f filter"
done

tmp=$(mktemp -d /var/tmp/throttle-wb.XXXXXX)
pids=()
cleanup ()
{
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || :; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME ARGS...: nbdkit in the foreground of a background job,
# serving $tmp/NAME.sock; sets $pid and $sock.
start ()
{
  local name=$1 i; shift
  sock=$tmp/$name.sock
  rm -f "$sock"
  "$NBDKIT" -f -v -U "$sock" "$@" >"$tmp/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for i in $(seq 100); do
    [ -S "$sock" ] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.log"; fail "$name: nbdkit did not start"; }
    sleep 0.1
  done
  fail "$name: no socket after 10 s"
}

# stop PID [SECS]: SIGTERM, and fail unless it exits within SECS.
stop ()
{
  kill -TERM "$1" 2>/dev/null || :
  wait_exit "$@"
}

wait_exit ()
{
  local p=$1 secs=${2:-10} i
  for i in $(seq $((secs * 10))); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || :; return 0; }
    sleep 0.1
  done
  fail "nbdkit $p still running $secs s after SIGTERM"
}

run () { echo "+ $*"; "$PY" "$check" "$@"; }

newdisk () { rm -f "$1"; truncate -s 64M "$1"; }

# TEST_WRITEBACK_ONLY="order flush" runs only those sections.
section ()
{
  case " ${TEST_WRITEBACK_ONLY:-$1} " in
    *" $1 "*) echo "== $1"; return 0 ;;
    *) return 1 ;;
  esac
}

# --- parameters and thread models -------------------------------------
if section parameters; then
  if out=$("$NBDKIT" -U - --filter="$filter" memory 1M throttle-mode=bogus \
             --run true 2>&1); then
    fail "throttle-mode=bogus accepted"
  fi
  grep -q "throttle-mode=bogus" <<<"$out" || fail "bad mode not named: $out"
  # The parameter is named (for -1, after nbdkit's parser's line:
  # plugin/throttle/throttle-parse.h).
  for bad in throttle-writeback-pool=0 throttle-writeback-pool=-1 \
             throttle-writeback-threads=0 throttle-writeback-threads=65; do
    if out=$("$NBDKIT" -U - --filter="$filter" memory 1M \
               throttle-mode=writeback $bad --run true 2>&1); then
      fail "$bad accepted"
    fi
    grep -qF -e "$bad:" <<<"$out" || fail "$bad: the parameter is not named: $out"
  done
  for s in all-requests connections; do
    if out=$("$NBDKIT" -U - --filter="$filter" --filter=noparallel memory 4M \
               serialize=$s throttle-mode=writeback --run true 2>&1); then
      fail "writeback over a serialize=$s backend was accepted"
    fi
    grep -q "thread model" <<<"$out" ||
      fail "serialize=$s: no thread-model message: $out"
  done
  "$NBDKIT" -U - --filter="$filter" --filter=noparallel memory 4M \
    serialize=requests throttle-mode=writeback \
    --run "$PY $check latency \$unixsocket serialize_requests" >/dev/null ||
    fail "writeback over a serialize=requests backend failed"
fi

# --- latency over a slow backend (printed as a ratio) -----------------
if section latency; then
  for mode in writethrough writeback; do
    start lat-$mode --filter="$filter" --filter=delay memory 64M \
      delay-write=100ms throttle-mode=$mode
    out=$(run latency "$sock" $mode)
    echo "$out"
    eval "med_$mode=$(sed -n 's/.*median_write_ms=\([0-9.]*\).*/\1/p' <<<"$out")"
    stop "$pid"
  done
  echo "write latency: writethrough ${med_writethrough} ms, writeback" \
       "${med_writeback} ms, ratio" \
       "$(awk "BEGIN { printf \"%.0f\", $med_writethrough / ($med_writeback + 0.001) }")x"
  awk "BEGIN { exit !($med_writeback < 50) }" ||
    fail "writeback writes waited for the 100 ms backend (median $med_writeback ms)"
  awk "BEGIN { exit !($med_writethrough >= 100) }" ||
    fail "writethrough median $med_writethrough ms: the delay filter did not delay"
fi

# --- a read returns the newest data -----------------------------------
if section overlay; then
  start overlay --filter="$filter" --filter=delay memory 64M \
    delay-write=1 throttle-mode=writeback throttle-writeback-threads=1
  run overlay "$sock"
  stop "$pid"
fi

# --- overlapping writes reach the backend in order --------------------
if section order; then
  newdisk "$tmp/order.img"
  start order --filter="$filter" --filter=pause file "$tmp/order.img" \
    pause-control="$tmp/order.ctl" throttle-mode=writeback \
    throttle-writeback-threads=8
  run order "$sock" "$tmp/order.img" "$tmp/order.ctl"
  stop "$pid"
fi

# --- zero and trim after older overlapping writes ---------------------
for op in zero trim; do
  section $op || continue
  newdisk "$tmp/$op.img"
  "$PY" -c "open('$tmp/$op.img','r+b').write(b'o' * (256 * 1024))"
  start $op --filter="$filter" --filter=delay file "$tmp/$op.img" \
    delay-write=500ms throttle-mode=writeback
  run $op "$sock" "$tmp/$op.img"
  stop "$pid"
done

# --- flush covers every connection's acknowledged writes --------------
if section flush; then
  newdisk "$tmp/flush.img"
  start flush --filter="$filter" --filter=delay file "$tmp/flush.img" \
    delay-write=200ms throttle-mode=writeback
  run flush "$sock" "$tmp/flush.img"
  stop "$pid"
fi

# --- FUA is on the backend before its reply ---------------------------
if section fua; then
  newdisk "$tmp/fua.img"
  start fua --filter="$filter" --filter=delay file "$tmp/fua.img" \
    delay-write=500ms throttle-mode=writeback
  run fua "$sock" "$tmp/fua.img"
  stop "$pid"
fi

# --- a failed background write is reported at flush -------------------
if section errors; then
  start errors --filter="$filter" --filter=error memory 64M \
    error-pwrite=EIO error-pwrite-rate=100% error-file="$tmp/errors.on" \
    throttle-mode=writeback
  run errors "$sock" "$tmp/errors.on"
  stop "$pid"
  grep -q "background write of 4096 bytes at 0 .* failed" "$tmp/errors.log" ||
    fail "the failed background write was not logged"
fi

# --- block status waits for pending writes ------------------------------
if section extents; then
  start extents --filter="$filter" --filter=delay memory 64M \
    delay-write=1 throttle-mode=writeback
  run extents "$sock"
  stop "$pid"
fi

# --- named exports are written through ---------------------------------
if section named; then
  start named --filter="$filter" --filter=delay memory 64M \
    delay-write=500ms throttle-mode=writeback
  run named "$sock"
  stop "$pid"
fi

# --- a full budget blocks new writes ----------------------------------
if section budget; then
  start budget --filter="$filter" --filter=delay memory 64M \
    delay-write=500ms throttle-mode=writeback throttle-capacity=256K
  run budget "$sock"
  stop "$pid"
fi

# --- many clients at once, every op checked -------------------------
# A small pool (writes wait for buffers, and the largest are written
# through) and a backend that takes a few ms per write, so that writes
# pile up and the overlay and the barriers are exercised.
if section hammer; then
  newdisk "$tmp/hammer.img"
  start hammer --filter="$filter" --filter=delay file "$tmp/hammer.img" \
    delay-write=2ms delay-zero=2ms throttle-mode=writeback \
    throttle-writeback-pool=1M throttle-capacity=2M
  run hammer "$sock" "$tmp/hammer.img" 8 ${TEST_WRITEBACK_OPS:-500}
  stop "$pid"
  grep "writeback summary" "$tmp/hammer.log" || fail "no writeback summary"
fi

# --- a clean shutdown writes every acknowledged write first -----------
# The backend is paused while the client writes and leaves and nbdkit
# is told to stop; nbdkit must still be there, waiting, until the
# backend resumes, and the writes must then be on the file.
if section drain; then
  newdisk "$tmp/drain.img"
  start drain --filter="$filter" --filter=pause file "$tmp/drain.img" \
    pause-control="$tmp/drain.ctl" throttle-mode=writeback
  run control "$tmp/drain.ctl" p
  run drain "$sock"
  kill -TERM "$pid"
  sleep 1
  kill -0 "$pid" 2>/dev/null ||
    fail "nbdkit exited with writes pending on a paused backend"
  run control "$tmp/drain.ctl" r
  wait_exit "$pid" 10
  run drain-check "$tmp/drain.img"
fi

echo "$0: PASS"
