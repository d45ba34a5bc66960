#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Imports run one way: the modules of the filter, of the disk plugin
# and of lib/ include each other in no circle, and lib/ includes
# nothing of nbdkit or of plugin/, and the filter's folders include
# only from their own and those below (include-graph.py, LAYERS).  First the check
# itself, on a made-up tree that breaks each rule.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"

graph="$srcdir/include-graph.py"
top="$srcdir/.."

bad=$tmp/bad
mkdir -p "$bad/lib" "$bad/plugin/throttle" "$bad/plugin/disk"
# plugin/throttle: a -> b -> c -> a, and d on a longer circle with them;
# e includes a but nothing comes back to e.
printf '#include "b.h"\n' > "$bad/plugin/throttle/a.c"
printf '#include "c.h"\n' > "$bad/plugin/throttle/b.c"
printf '#include "a.h"\n#include "d.h"\n' > "$bad/plugin/throttle/c.h"
printf '#include "a.h"\n' > "$bad/plugin/throttle/d.c"
printf '#include "a.h"\n' > "$bad/plugin/throttle/e.c"
touch "$bad/plugin/throttle/a.h" "$bad/plugin/throttle/b.h" \
  "$bad/plugin/throttle/d.h" "$bad/plugin/throttle/e.h"
# plugin/disk: a second circle, reported as well as the first.
printf '#include "y.h"\n' > "$bad/plugin/disk/x.c"
printf '#include "x.h"\n' > "$bad/plugin/disk/y.c"
touch "$bad/plugin/disk/x.h" "$bad/plugin/disk/y.h"
printf '#include <nbdkit-filter.h>\n#include "throttle-x.h"\n' > "$bad/lib/l.c"
touch "$bad/plugin/disk/throttle-x.h"
# lib's own public header may be included, but must itself stay free
# of nbdkit.
printf '#include "nbdkit-throttle-metric.h"\n' > "$bad/lib/m.c"
printf '#include <nbdkit-plugin.h>\n' > "$bad/lib/nbdkit-throttle-metric.h"
# The filter's folders in layers: the guards may not include what
# reports on them (control/), which may include the guards.
for d in params core compat guards writeback adapt control; do
  mkdir -p "$bad/plugin/throttle/$d"
done
printf '#include "throttle-ctl.h"\n' > "$bad/plugin/throttle/guards/g.c"
touch "$bad/plugin/throttle/guards/g.h" "$bad/plugin/throttle/control/throttle-ctl.h"
r=0; $PY "$graph" "$bad" > "$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 1 ] || fail "include-graph.py: exit $r on a tree that breaks every rule"
grep -qx 'plugin/throttle/guards/g.c includes throttle-ctl.h of control/, a folder above guards/' \
  "$tmp/out" || fail "include-graph.py does not name an include from a folder above"
grep -qx 'plugin/throttle: modules include each other in a circle: a -> b -> c -> a' \
  "$tmp/out" || fail "include-graph.py does not name the circle"
grep -qx 'plugin/throttle: these modules all lie on circles through each other: a, b, c, d' \
  "$tmp/out" || fail "include-graph.py does not name every module on a circle"
grep -qx 'plugin/disk: modules include each other in a circle: x -> y -> x' \
  "$tmp/out" || fail "include-graph.py names only the first circle"
grep -q '^lib/l.c includes nbdkit-filter.h' "$tmp/out" ||
  fail "include-graph.py does not name lib's include of nbdkit"
grep -q '^lib/l.c includes throttle-x.h of plugin/' "$tmp/out" ||
  fail "include-graph.py does not name lib's include of plugin/"
grep -q '^lib/nbdkit-throttle-metric.h includes nbdkit-plugin.h' "$tmp/out" ||
  fail "include-graph.py lets lib's public header include nbdkit"
[ "$(wc -l < "$tmp/out")" = 7 ] ||
  fail "include-graph.py reports more than what is wrong (e, or m.c)"

r=0; $PY "$graph" "$top" > "$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 0 ] || fail "the project's includes break the rules above"
echo "ok: no circle among the modules, lib/ free of nbdkit and plugin/, the filter's folders in layers"
