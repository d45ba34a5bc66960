#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# throttle-mode=writeback against a real nbdkit: each promise of
# "WRITEBACK MODE" in nbdkit-throttle-design(1) is asserted here, with
# nbdkit's delay, pause and error filters below the throttle to make
# the backend slow, stopped or failing, and the file plugin so that the
# test can look at what the backend really has.  (That it serves the
# default export alone: test-writeback-names.sh.)

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

check="$srcdir/writeback-check.py"
filter=$THROTTLE_FILTER

requires_file "$filter"
requires "$NBDKIT" --version
requires $PY -c 'import nbd'
for f in delay pause error noparallel; do
  requires "$NBDKIT" --filter=$f null --dump-plugin
done
requires_writeback

# start NAME ARGS...: start_nbdkit, and $sock for writeback-check.py.
start ()
{
  start_nbdkit "$@"
  sock=$tmp/$1.sock
}

# stop PID: SIGTERM, and fail unless it exits within 10 s.
stop ()
{
  stop_nbdkit "$1" 10
}

run () { echo "+ $*"; "$PY" "$check" "$@"; }

newdisk () { rm -f "$1"; truncate -s 64M "$1"; }

# TEST_WRITEBACK_ONLY="order flush" runs only those sections; a name
# that is no section fails, rather than running nothing and passing.
sections="parameters latency overlay order zero trim flush fua errors extents budget hammer drain"
for s in ${TEST_WRITEBACK_ONLY:-}; do
  case " $sections " in
    *" $s "*) ;;
    *) fail "TEST_WRITEBACK_ONLY: no section '$s' (the sections: $sections)" ;;
  esac
done
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
  # plugin/throttle/params/throttle-parse.h).
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
