#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# nbdkit for the tests of a sanitizer build (./configure
# --enable-sanitizers=...): the Makefile sets NBDKIT to this script.
#
# The filter and the test objects carry a sanitizer runtime, which
# must be the first library of the process, and nbdkit is not built
# with one: preload the runtime the filter links, and the shim
# (sanitizer-shim.c).  With THROTTLE_SANITIZER_LOGS=DIR every report
# goes to a file in DIR (sanitizer-reports.sh reads them) and
# DIR/commands says which nbdkit command each process id ran.
#
# Environment: REAL_NBDKIT (default nbdkit), THROTTLE_FILTER,
# SANITIZER_SHIM (the shim's .so), THROTTLE_SANITIZER_LOGS.

real=${REAL_NBDKIT:-nbdkit}
rt=
for f in "${THROTTLE_FILTER:-}" "${TEST_PLUGIN:-}"; do
  [ -f "$f" ] || continue
  # ASan or TSan must come first; UBSan alone only if neither.
  rt=$(ldd "$f" 2>/dev/null |
       awk '$1 ~ /^lib(asan|tsan)\.so/ { print $3; found = 1; exit }
            $1 ~ /^libubsan\.so/ { u = $3 }
            END { if (!found && u) print u }')
  [ -n "$rt" ] && break
done
[ -n "$rt" ] || exec "$real" "$@"     # not a sanitizer build after all

log=
if [ -n "${THROTTLE_SANITIZER_LOGS:-}" ]; then
  mkdir -p "$THROTTLE_SANITIZER_LOGS"
  log=":log_path=$THROTTLE_SANITIZER_LOGS/nbdkit"
  echo "$$ $real $*" >>"$THROTTLE_SANITIZER_LOGS/commands"
fi
# halt_on_error: the first error ends nbdkit, so no test passes by not
# looking.  The caller's own options come last and win.
ASAN_OPTIONS="halt_on_error=1:detect_leaks=1$log${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1$log${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1$log${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
LD_PRELOAD="$rt${SANITIZER_SHIM:+:$SANITIZER_SHIM}${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS LD_PRELOAD
exec "$real" "$@"
