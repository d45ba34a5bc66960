#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A request served in parts is, to the plugin and the client, the
# request it was (issue 38): every part is called in the request's own
# thread, so the error a plugin sets with nbdkit_set_error (without
# errno_is_preserved, as most plugins and Python's and Rust's bindings
# do) reaches the client unchanged and nbdkit_export_name () answers;
# and a part that fails ends its request: no part after it reaches the
# plugin.  Before, parts served in helper threads turned ENOSPC into
# EIO, and a 4M write whose first part failed still sent all its parts.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires_file "$TEST_PLUGIN"

M=$((1024 * 1024))

# write_errno NAME OFFSET COUNT: one write; prints the errno name it
# failed with, or "ok".
write_errno ()
{
  $PY - "$uri" "$2" "$3" <<'PYEOF' 2>"$tmp/$1.err" || { cat "$tmp/$1.err"; fail "$1: the client failed"; }
import errno, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
try:
    h.pwrite(b"x" * int(sys.argv[3]), int(sys.argv[2]))
    print("ok")
except nbd.Error as e:
    print(errno.errorcode.get(e.errnum, str(e.errnum)))
h.shutdown()
PYEOF
}

# one_write NAME OFFSET COUNT NBDKIT-ARGS...: a server of the test
# plugin (its state in $state) taking one write; the errno in $got.
one_write ()
{
  local name=$1 offset=$2 count=$3
  shift 3
  state=$tmp/$name.state
  start_nbdkit "$name" "$@" statefile="$state"
  got=$(write_errno "$name" "$offset" "$count")
  stop_nbdkit "$pid"
}

# 1. A 2M write at 31M over a plugin failing writes past 32M with
# ENOSPC: without the filter, at a capacity that serves it whole, and
# at one that serves it in two parts, the second failing.
for case in plain whole:16M parts:1M parts-noparallel:1M; do
  name=${case%%:*}
  opts=() params=()
  case $name in
    plain) ;;
    parts-noparallel) opts=(--filter="$THROTTLE_FILTER" --filter=noparallel
                            -D throttle.verbose=1)
                      params=(throttle-capacity=${case#*:}) ;;
    *) opts=(--filter="$THROTTLE_FILTER" -D throttle.verbose=1)
       params=(throttle-capacity=${case#*:}) ;;
  esac
  one_write enospc-$name $((31 * M)) $((2 * M)) "${opts[@]}" "$TEST_PLUGIN" \
    delay-ms=0 fail-above=32M "${params[@]}"
  echo "$name: the client got $got; the plugin saw $(statefield "$state" writes) writes"
  [ "$got" = ENOSPC ] || fail_later "$name: the client got $got, not the plugin's ENOSPC"
  [ "$(statefield "$state" failed_writes)" = 1 ] ||
    fail_later "$name: $(statefield "$state" failed_writes) writes failed at the plugin, not 1"
  [ "$(statefield "$state" export_name_errors)" = 0 ] ||
    fail_later "$name: nbdkit_export_name () failed in $(statefield "$state" export_name_errors) writes"
  case $name in
    parts*)
      [ "$(statefield "$state" writes)" = 2 ] ||
        fail_later "$name: $(statefield "$state" writes) writes at the plugin, not the 2 parts"
      grep -q "(a part)" "$tmp/enospc-$name.log" ||
        fail_later "$name: the write was not served in parts" ;;
  esac
done

# 2. A 4M write whose first part fails: no other part reaches the
# plugin, at a capacity of 1M (4 parts) and of 64K (64 and more).
for cap in 1M 64K; do
  one_write first-fails-$cap 0 $((4 * M)) --filter="$THROTTLE_FILTER" \
    "$TEST_PLUGIN" delay-ms=0 fail-above=0 throttle-capacity=$cap \
    -D throttle.verbose=1
  echo "capacity $cap: the client got $got; $(statefield "$state" writes) writes reached the plugin"
  [ "$got" = ENOSPC ] || fail_later "capacity $cap: the client got $got, not ENOSPC"
  [ "$(statefield "$state" writes)" = 1 ] ||
    fail_later "capacity $cap: $(statefield "$state" writes) parts reached the plugin, not the failed first alone"
  [ "$(statefield "$state" writes_after_failure)" = 0 ] ||
    fail_later "capacity $cap: $(statefield "$state" writes_after_failure) parts reached the plugin after the failure"
  grep -q "(a part)" "$tmp/first-fails-$cap.log" ||
    fail_later "capacity $cap: the write was not served in parts"
  [ "$(summary "$tmp/first-fails-$cap.log" in_flight)" = 0 ] ||
    fail_later "capacity $cap: units left in flight"
done
