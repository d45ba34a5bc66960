#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The shims for nbdkit before 1.33.10 sit behind one seam
# (plugin/throttle/compat/throttle-compat.h): the filter built against
# such an nbdkit has every hook of theirs; built against 1.33.10 or
# later it has no function of theirs at all (nm).  Which case this is
# comes from the nbdkit the tests run, so a configure that decided
# wrong fails here too.  The functions looked for are read from the
# sources of compat/, so a shim added there is covered as it comes.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires nm --version

compat=${abs_top_srcdir:-$srcdir/..}/plugin/throttle/compat
real=${REAL_NBDKIT:-$NBDKIT}    # a sanitizer build's wrapper, unwrapped

version=$("$real" --version | awk '$1 == "nbdkit" { print $2; exit }')
[[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+) ]] ||
  fail "$real --version: no version in what it printed: '$version'"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} micro=${BASH_REMATCH[3]}
if (( major < 1 || (major == 1 && (minor < 33 ||
                                    (minor == 33 && micro < 10))) )); then
  old=yes
else
  old=no
fi
[ "${THROTTLE_NBDKIT_OLD:-}" = $old ] ||
  fail "nbdkit $version: configure set THROTTLE_NBDKIT_OLD=${THROTTLE_NBDKIT_OLD:-(unset)}, not $old"

# Every function the shims define (in the project's style a
# definition's name starts its line, then " ("), and the hooks the
# filter calls (extern in throttle-compat.h).
mapfile -t defined < <(sed -n 's/^\([a-z_][a-z0-9_]*\) (.*/\1/p' \
                          "$compat"/*.c | sort -u)
mapfile -t hooks < <(sed -n \
  's/^extern [^(]*[ *]\(throttle_[a-z0-9_]*\)\( (.*\)\{0,1\}$/\1/p' \
  "$compat/throttle-compat.h" | sort -u)
[ ${#defined[@]} -ge 10 ] && [ ${#hooks[@]} -ge 9 ] ||
  fail "read ${#defined[@]} functions from $compat/*.c and ${#hooks[@]} hooks from throttle-compat.h: has their style changed?"
# The hooks are among the functions defined (throttle_pace_out_gate is
# a variable, defined in throttle-pace.c too).
for f in "${hooks[@]}"; do
  [ "$f" = throttle_pace_out_gate ] && continue
  printf '%s\n' "${defined[@]}" | grep -qx "$f" ||
    fail "hook $f of throttle-compat.h is defined in no file of $compat"
done

# The filter's symbols with, where it has debugging information, the
# source line of each.  Against a later nbdkit, an unoptimised build
# keeps the header's empty inline hooks as local functions of the same
# names: those are located in throttle-compat.h and are no shim's code.
nm --defined-only -l "$THROTTLE_FILTER" > "$tmp/nm" 2>/dev/null ||
  nm --defined-only "$THROTTLE_FILTER" > "$tmp/nm" ||
  fail "nm cannot read $THROTTLE_FILTER"
grep -v 'throttle-compat\.h:[0-9]' "$tmp/nm" |
  awk '{ print $3 }' | sort -u > "$tmp/symbols"
[ "$(wc -l < "$tmp/symbols")" -ge 100 ] ||
  fail "nm lists only $(wc -l < "$tmp/symbols") symbols in $THROTTLE_FILTER: stripped?"

if [ $old = yes ]; then
  for f in "${hooks[@]}"; do
    grep -qx "$f" "$tmp/symbols" ||
      fail "nbdkit $version needs the shims, but $f is not in $THROTTLE_FILTER"
  done
  pass "nbdkit $version: all ${#hooks[@]} hooks of the shims are in the filter"
else
  # By name: the functions with the project's prefix (a static one,
  # such as say, may have a namesake elsewhere in the filter); by
  # source line, where there is debugging information: all of them.
  found=$(printf '%s\n' "${defined[@]}" | grep '^throttle_' |
            grep -xFf - "$tmp/symbols" || :)
  [ -z "$found" ] ||
    fail "nbdkit $version needs no shim, but $THROTTLE_FILTER has their functions: $(echo $found)"
  found=$(grep -E '/compat/[^/]*\.c:[0-9]' "$tmp/nm" || :)
  [ -z "$found" ] ||
    fail "nbdkit $version needs no shim, but $THROTTLE_FILTER has code from compat/: $found"
  pass "nbdkit $version: none of the ${#defined[@]} functions of the shims is in the filter"
fi
