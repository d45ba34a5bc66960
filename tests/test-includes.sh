#!/usr/bin/env bash
# Imports run one way: the modules of the filter, of the disk plugin
# and of lib/ include each other in no circle, and lib/ includes
# nothing of nbdkit or of plugin/ (include-graph.py).  First the check
# itself, on a made-up tree that breaks each rule.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"

graph="$srcdir/include-graph.py"
top="$srcdir/.."

bad=$tmp/bad
mkdir -p "$bad/lib" "$bad/plugin/throttle" "$bad/plugin/disk"
printf '#include "b.h"\n' > "$bad/plugin/throttle/a.c"
printf '#include "c.h"\n' > "$bad/plugin/throttle/b.c"
printf '#include "a.h"\n' > "$bad/plugin/throttle/c.h"
touch "$bad/plugin/throttle/a.h" "$bad/plugin/throttle/b.h"
printf '#include <nbdkit-filter.h>\n#include "throttle-x.h"\n' > "$bad/lib/l.c"
touch "$bad/plugin/disk/throttle-x.h"
r=0; $PY "$graph" "$bad" > "$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 1 ] || fail "include-graph.py: exit $r on a tree that breaks every rule"
grep -qx 'plugin/throttle: modules include each other in a circle: a -> b -> c -> a' \
  "$tmp/out" || fail "include-graph.py does not name the circle"
grep -q '^lib/l.c includes nbdkit-filter.h' "$tmp/out" ||
  fail "include-graph.py does not name lib's include of nbdkit"
grep -q '^lib/l.c includes throttle-x.h of plugin/' "$tmp/out" ||
  fail "include-graph.py does not name lib's include of plugin/"

r=0; $PY "$graph" "$top" > "$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 0 ] || fail "the project's includes break the rules above"
echo "ok: no circle among the modules, lib/ free of nbdkit and plugin/"
