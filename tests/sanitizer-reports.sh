#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# sanitizer-reports.sh DIR: print the sanitizer reports found under DIR
# (written by nbdkit-sanitized.sh's log_path) and exit 1 if any of them
# is about our code.
#
# Every report counts, except a leak that nbdkit 1.32 itself makes: it
# does not free the contexts of connections still open when it exits
# (e.g. after SIGTERM with requests blocked), and so our handles,
# which it owns, leak with them.  A direct leak whose allocating frame
# is in nbdkit's binary or in one of nbdkit's own plugins and filters
# is nbdkit's; the indirect leaks hanging from it are too.  A direct
# leak allocated by our code always counts, whoever called it.  (Frames
# in libc and the runtime are skipped to find the allocating frame.)

dir=$1
[ -d "$dir" ] || exit 0
nbdkit_bin=$(command -v "${REAL_NBDKIT:-nbdkit}" 2>/dev/null)
nbdkit_bin=$(readlink -f "${nbdkit_bin:-/usr/sbin/nbdkit}")
bad=0

for f in $(find "$dir" -type f ! -name commands | sort); do
  [ -s "$f" ] || continue
  verdict=$(awk -v nbdkit="$nbdkit_bin" '
    function decide() {
      if (inleak && !decided) { if (kind == "Direct") ours++ ; decided = 1 }
    }
    /ERROR: AddressSanitizer|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer|runtime error:|UndefinedBehaviorSanitizer|WARNING: AddressSanitizer/ { other++ }
    /^(Direct|Indirect) leak of/ {
      decide(); inleak = 1; decided = 0; kind = $1
      if (kind == "Direct") direct++; else indirect++
      next
    }
    inleak && !decided && /^ *#[0-9]+ / {
      if ($0 ~ /libasan|libtsan|libubsan|libc\.so|ld-linux|__interceptor_|asan_malloc/) next
      if (index($0, "(" nbdkit "+0x") || $0 ~ /\/nbdkit\/(plugins|filters)\//) { if (kind == "Direct") theirs++ }
      else if (kind == "Direct") ours++
      decided = 1
      next
    }
    inleak && /^$/ { decide(); inleak = 0 }
    END {
      decide()
      if (indirect > 0 && direct == 0) ours++
      printf "%d %d %d\n", other, ours, theirs
    }' "$f")
  set -- $verdict
  pid=${f##*.}
  cmd=$(awk -v p="$pid" '$1 == p { $1 = ""; print; exit }' "$dir/commands" "$(dirname "$f")/commands" 2>/dev/null | head -1)
  if grep -q 'LeakSanitizer does not work under ptrace' "$f"; then
    echo "note: $f: no leak check: nbdkit ran under ptrace (strace) (nbdkit$cmd)"
  elif [ "$1" -gt 0 ] || [ "$2" -gt 0 ]; then
    bad=1
    echo "sanitizer report $f (nbdkit$cmd):"
    cat "$f"
  else
    echo "note: $f: $3 leak(s) of nbdkit's own at exit, not ours (nbdkit$cmd)"
  fi
done
exit $bad
