#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Data written through the filter reads back intact, with a capacity
# far below what the clients send: nbdcopy (multi-connection), fio's
# verify, and qemu-io patterns.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires nbdcopy --version
requires fio --version
requires qemu-io --version

start_nbdkit data --filter="$THROTTLE_FILTER" memory 64M throttle-capacity=256K \
  -D throttle.verbose=1

# nbdcopy: 4 connections, 64 requests in flight each, 1M requests.
head -c $((48 * 1024 * 1024)) /dev/urandom >"$tmp/in"
truncate -s 64M "$tmp/in"
nbdcopy --connections=4 --requests=64 --request-size=1048576 "$tmp/in" "$uri"
nbdcopy "$uri" "$tmp/out"
cmp "$tmp/in" "$tmp/out" || fail "nbdcopy: data read back differs"
echo "nbdcopy: 64M round trip intact"

# fio: random 4K..128K writes at depth 32 with crc32c verification.
fio --name=verify --ioengine=nbd --uri="$uri" --rw=randwrite --bsrange=4k-128k \
  --iodepth=32 --size=32M --verify=crc32c --do_verify=1 --verify_fatal=1 \
  --numjobs=1 --output="$tmp/fio.out" || { cat "$tmp/fio.out"; fail "fio verify failed"; }
grep -q "err= 0" "$tmp/fio.out" || { cat "$tmp/fio.out"; fail "fio reported errors"; }
echo "fio: verify passed"

# qemu-io: a 2M pattern written in one request, served in parts of at
# most the capacity.
qemu-io -f raw "$uri" -c "write -P 0xa5 1M 2M" -c "read -P 0xa5 1M 2M" \
  >"$tmp/qemu-io.out" || { cat "$tmp/qemu-io.out"; fail "qemu-io failed"; }
grep -q "Pattern verification failed" "$tmp/qemu-io.out" && fail "qemu-io pattern mismatch"
echo "qemu-io: pattern intact"

stop_nbdkit $pid
[ "$(summary "$tmp/data.log" in_flight)" = 0 ] || fail "units left in flight"
[ "$(summary "$tmp/data.log" peak)" -le 262144 ] || fail "peak above capacity"
# Whether a request waited depends on how many the clients keep in
# flight, which a loaded machine changes; the 2M write is served in
# parts whatever the machine.
grep -q "admit write count=.* offset=1048576 .*(a part)" "$tmp/data.log" ||
  fail "qemu-io's 2M write was not served in parts"
echo "the capacity bound: $(grep -c '(a part)' "$tmp/data.log") parts, waited=$(summary "$tmp/data.log" waited)"
