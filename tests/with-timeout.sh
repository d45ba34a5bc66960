#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# with-timeout.sh TEST [ARGS...]: the LOG_COMPILER of every test.  A
# test that hangs fails after a time limit instead of holding the run
# for good; the integration tests print their servers' logs as they
# fail (functions.sh).
#
# The limit (THROTTLE_TEST_TIMEOUT seconds, default 300) is many times
# what any test takes on a loaded 2-core machine, and 4 times that in
# a sanitizer build, which runs 5-10x slower; the swap guest suite
# has THROTTLE_SWAP_TIMEOUT (default 4500: it starts every MUST boot
# whatever the time, CI's 19 and raw-disk's 3, two at a time: 12 to 25
# minutes when they pass, and a boot that hangs is stopped by
# run-guest.sh's detectors within about 3 minutes with its task dump;
# only boots that keep printing until its 600 s limit, all of them,
# would pass this one).

secs=${THROTTLE_TEST_TIMEOUT:-300}
case ${SANITIZERS:-no} in
  no|"") ;;
  *) secs=$((secs * 4)) ;;
esac
case $1 in
  */check-swap.sh|check-swap.sh) secs=${THROTTLE_SWAP_TIMEOUT:-4500} ;;
esac

# timeout puts the test in a process group of its own and signals the
# whole group: the test's servers and clients go with it.  That group
# is not the terminal's, so nothing in it may read the terminal.
timeout -k 30 "$secs" "$@" </dev/null
rc=$?
case $rc in
  124|137) echo "$1: FAIL: no result after $secs s (THROTTLE_TEST_TIMEOUT)" >&2 ;;
esac
exit $rc
