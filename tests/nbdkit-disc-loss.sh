#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdkit-disc-loss.sh [RUNS] [PAUSE]: reproduce, with nbdkit alone (no
# throttle filter), nbdkit's loss of requests a client queued before
# it ended the connection cleanly.
#
# nbdkit's eval plugin serves a disk whose every write takes 300 ms,
# with the parallel thread model.  (Not the delay filter: its
# nbdkit_nanosleep gives up, by design, as soon as the client ends.)  In each run a raw client (hostile-client.py
# queued) sends 8 pipelined 64K writes, waits PAUSE seconds (default
# 0), then ends: "disc" sends NBD_CMD_DISC and shuts its write side
# (what libnbd's nbd_shutdown does), "halfclose" only shuts its write
# side.  It reads every reply until the server closes.  The NBD
# protocol says the server MUST complete every outstanding request
# before it acts on NBD_CMD_DISC; nbdkit answers some with ESHUTDOWN
# without performing them: a worker that had read its request but not
# yet reached server/protocol.c's
#     if (quit || cs < STATUS_ACTIVE) error = ESHUTDOWN;
# when another worker read the DISC (or EOF) fails it.  The same line
# is in nbdkit 1.32.5, 1.36.5 and 1.44.1.
#
# One server; RUNS connections (default 20) one after another for each
# way of ending.  Prints each connection that lost writes, and a
# summary per way of ending.
# Exits 0 whatever nbdkit lost (it reports, it does not judge), 1 if
# the run itself went wrong (a write with no reply at all, a server
# that did not start).  Needs nbdkit (its eval plugin) and python3.  NBDKIT (default nbdkit) is the nbdkit to try.
set -euo pipefail
runs=${1:-20}
pause=${2:-0}
nbdkit=${NBDKIT:-nbdkit}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3         # the system python, as the tests use
tmp=$(mktemp -d /var/tmp/nbdkit-disc-loss.XXXXXX)
server=
trap '[ -z "$server" ] || kill "$server" 2>/dev/null || :; rm -rf "$tmp"' EXIT

echo "$("$nbdkit" --version), $runs connections per case, 8 x 64K writes each, pause $pause s"
sock=$tmp/sock
"$nbdkit" -f -v -U "$sock" eval thread_model='echo parallel' \
  get_size='echo 64M' pwrite='sleep 0.3; cat >/dev/null' >"$tmp/log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$tmp/log"; echo "nbdkit did not start"; exit 1; }
for how in disc halfclose; do
  lossy=0 lost=0
  for run in $(seq "$runs"); do
    "$py" "$here/hostile-client.py" queued "$sock" $how 8 65536 "$pause" \
      >"$tmp/out" || { cat "$tmp/out"; echo "a write had no reply"; exit 1; }
    # NBD_ESHUTDOWN is 108: nbdkit answers it without performing the
    # write.
    failed=$(awk '$1 == "reply" && $3 == 108 { printf " %s", $2 }' "$tmp/out")
    n=$(wc -w <<<"$failed")
    if [ "$n" -gt 0 ]; then
      echo "$how connection $run: writes answered ESHUTDOWN:$failed"
      lossy=$((lossy + 1)); lost=$((lost + n))
    fi
  done
  echo "== $how: $lossy of $runs connections lost writes ($lost of $((runs * 8)))"
done
