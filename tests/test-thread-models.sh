#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The filter works whatever the plugin's thread model is, without
# deadlocking itself: nbdkit's noparallel filter forces each model.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires $PY -c 'import nbd'

for model in requests all-requests connections; do
  conns=2
  # Serialized connections would make the second client wait for the
  # first to disconnect.
  [ $model = connections ] && conns=1
  start_nbdkit tm-$model --filter="$THROTTLE_FILTER" --filter=noparallel \
    memory 64M serialize=$model throttle-capacity=64K
  timeout 60 $PY "$srcdir/client.py" "$uri" --conns $conns --depth 16 \
    --count 64 --size 65536 --op write,zero --timeout 50 ||
    fail "serialize=$model: the load did not complete"
  stop_nbdkit $pid
  grep -q "using thread model: serialize_" "$tmp/tm-$model.log" ||
    fail "serialize=$model: nbdkit did not use a serialized model"
  [ "$(summary "$tmp/tm-$model.log" in_flight)" = 0 ] || fail "units left in flight"
  echo "serialize=$model: ok"
done
