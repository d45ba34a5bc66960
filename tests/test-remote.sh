#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Storage over a network: the filter in front of nbdkit's nbd plugin
# forwarding to a second nbdkit (the memory plugin) on 127.0.0.1.
# Data goes through the chain and reaches the storage server; the
# swap verdict's one warning line at start names vm.min_free_kbytes (a
# file stood in for it with THROTTLE_MIN_FREE_FILE in the environment) when it is below
# 16384 and the plugin's parameters say its storage is remote (or
# throttle-remote=true says so), and not otherwise; a bad
# throttle-remote stops nbdkit; likewise vm.watermark_boost_factor
# above 0 (THROTTLE_BOOST_FILE).  See plugin/throttle/guards/throttle-verdict.h;
# the verdict in stats and the metrics: test-swap-safe.sh.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires "$NBDKIT" nbd --version
requires $PY -c 'import nbd'

low=$tmp/min_free.low
enough=$tmp/min_free.enough
echo 1970 > "$low"            # a 320 MiB guest's default
echo 16384 > "$enough"

# The storage server on a free TCP port of 127.0.0.1: the port is
# picked free, but another process may take it before nbdkit binds it,
# so a server that does not start is tried again on another.  nbdkit
# writes its PID file once its socket is bound.
port=
for try in 1 2 3 4 5; do
  p=$($PY -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
  rm -f "$tmp/storage.pid"
  "$NBDKIT" -f -v -i 127.0.0.1 -p "$p" -P "$tmp/storage.pid" memory 16M \
    >"$tmp/storage.log" 2>&1 &
  storage=$!
  _pids+=("$storage")
  if wait_until 10 "$storage" test -s "$tmp/storage.pid"; then
    port=$p
    break
  fi
  echo "storage server did not start on port $p (try $try): trying another"
done
[ -n "$port" ] || fail "no storage server on 127.0.0.1 after 5 ports"
storage_uri=nbd://127.0.0.1:$port

# warnings LOG: the filter's warning lines about vm.min_free_kbytes.
warnings ()
{
  grep 'throttle: warning: .*vm\.min_free_kbytes' "$1" || :
}

# The chain, with the setting too low: one warning, naming the
# setting, its value and the minimum; and data written through the
# filter is on the storage server.
THROTTLE_MIN_FREE_FILE="$low" start_nbdkit remote --filter="$THROTTLE_FILTER" nbd hostname=127.0.0.1 \
  port="$port"
$PY - "$uri" "$storage_uri" <<'EOF' || fail "the data did not go through the chain"
import sys
import nbd

pattern = bytes(range(256)) * 256          # 64K
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(pattern, 1 << 20)
h.flush()
assert h.pread(len(pattern), 1 << 20) == pattern, "read back through the filter"
h.shutdown()
s = nbd.NBD()
s.connect_uri(sys.argv[2])
assert s.pread(len(pattern), 1 << 20) == pattern, "read on the storage server"
s.shutdown()
EOF
echo "ok: 64K written through the filter and the nbd plugin reads back, there and on the storage server"
stop_nbdkit $pid
warnings "$tmp/remote.log" > "$tmp/w"
cat "$tmp/w"
[ "$(wc -l < "$tmp/w")" = 1 ] ||
  fail "hostname=, min_free 1970: $(wc -l < "$tmp/w") warnings, not 1"
grep -q 'vm\.min_free_kbytes is 1970, below 16384' "$tmp/w" ||
  fail "the warning does not name vm.min_free_kbytes, 1970 and 16384"
grep -q 'sysctl vm\.min_free_kbytes=16384' "$tmp/w" ||
  fail "the warning does not say what to set"
grep -q 'warning: not safe for swap: .*min-free-kbytes (vm\.min_free_kbytes is 1970' "$tmp/w" ||
  fail "the warning is not the swap verdict's"
echo "ok: hostname=, min_free 1970: one warning"

# As much as the minimum: no warning, but the debug log says it checked.
THROTTLE_MIN_FREE_FILE="$enough" start_nbdkit enough --filter="$THROTTLE_FILTER" nbd hostname=127.0.0.1 \
  port="$port"
$PY -c 'import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.pread(4096, 0); h.shutdown()' "$uri"
stop_nbdkit $pid
[ -z "$(warnings "$tmp/enough.log")" ] ||
  { warnings "$tmp/enough.log"; fail "warned with min_free 16384"; }
grep -q 'throttle: storage over a network (the plugin.s hostname=): vm\.min_free_kbytes 16384' \
  "$tmp/enough.log" || fail "no debug line of the check with min_free 16384"
echo "ok: hostname=, min_free 16384: no warning"

# remote_case EXPECT ARGS...: nbdkit with the filter and ARGS (the
# plugin and its parameters) starts and exits at once (--run true);
# EXPECT is the number of warnings about vm.min_free_kbytes.
remote_case ()
{
  local expect=$1 n; shift
  "$NBDKIT" -v -U - --filter="$THROTTLE_FILTER" "$@" --run true \
    >"$tmp/case.log" 2>&1 || { cat "$tmp/case.log"; fail "nbdkit did not start: $*"; }
  n=$(warnings "$tmp/case.log" | wc -l)
  [ "$n" = "$expect" ] ||
    { warnings "$tmp/case.log"; fail "$*: $n warnings, not $expect"; }
  echo "ok: $n warning(s): $*"
}
# The operator's word over the detection, either way.
THROTTLE_MIN_FREE_FILE="$low" remote_case 0 nbd hostname=127.0.0.1 port="$port" throttle-remote=false
THROTTLE_MIN_FREE_FILE="$low" remote_case 1 memory 1M throttle-remote=true
THROTTLE_MIN_FREE_FILE="$enough" remote_case 0 memory 1M throttle-remote=true
# What the detection takes for remote, and what not.
THROTTLE_MIN_FREE_FILE="$low" remote_case 0 memory 1M
THROTTLE_MIN_FREE_FILE="$low" remote_case 1 nbd uri="$storage_uri"
THROTTLE_MIN_FREE_FILE="$low" remote_case 1 nbd uri="nbds://127.0.0.1:$port"
THROTTLE_MIN_FREE_FILE="$low" remote_case 0 nbd uri="nbd+unix:///?socket=$tmp/none.sock"
THROTTLE_MIN_FREE_FILE="$low" remote_case 0 nbd socket="$tmp/none.sock"
if "$NBDKIT" curl --version >/dev/null 2>&1; then
  THROTTLE_MIN_FREE_FILE="$low" remote_case 1 curl url="http://127.0.0.1:$port/disk"
  THROTTLE_MIN_FREE_FILE="$low" remote_case 0 curl url="file://$low"
fi
if "$NBDKIT" ssh --version >/dev/null 2>&1; then
  THROTTLE_MIN_FREE_FILE="$low" remote_case 1 ssh host=127.0.0.1 path=/disk
fi
# A setting that cannot be read is not warned about: the debug log
# says so.
THROTTLE_MIN_FREE_FILE="$tmp/none" remote_case 0 memory 1M throttle-remote=true
grep -q "throttle: cannot read $tmp/none: .*not checking vm\.min_free_kbytes" \
  "$tmp/case.log" || { cat "$tmp/case.log"; fail "no debug line of the unreadable file"; }
echo "ok: an unreadable file: no warning, a debug line"

# Watermark boosting: a reason of the verdict with the storage remote
# and vm.watermark_boost_factor above 0 (a file stood in for it with
# THROTTLE_BOOST_FILE), named in the same one line; not with 0, not
# with local storage, not with a file that cannot be read.
boost_on=$tmp/boost.on
boost_off=$tmp/boost.off
echo 15000 > "$boost_on"      # the kernel's default
echo 0 > "$boost_off"
boost_case ()
{
  local expect=$1 n; shift
  "$NBDKIT" -v -U - --filter="$THROTTLE_FILTER" "$@" --run true \
    >"$tmp/case.log" 2>&1 || { cat "$tmp/case.log"; fail "nbdkit did not start: $*"; }
  n=$(grep -c 'throttle: warning: not safe for swap: .*watermark-boost (vm\.watermark_boost_factor is 15000: .*set sysctl vm\.watermark_boost_factor=0' "$tmp/case.log" || :)
  [ "$n" = "$expect" ] ||
    { grep 'warning' "$tmp/case.log"; fail "$*: $n boost warnings, not $expect"; }
  echo "ok: $n boost warning(s): $*"
}
THROTTLE_MIN_FREE_FILE="$enough" THROTTLE_BOOST_FILE="$boost_on" boost_case 1 memory 1M throttle-remote=true
THROTTLE_MIN_FREE_FILE="$enough" THROTTLE_BOOST_FILE="$boost_off" boost_case 0 memory 1M throttle-remote=true
THROTTLE_BOOST_FILE="$boost_on" boost_case 0 memory 1M
THROTTLE_MIN_FREE_FILE="$low" THROTTLE_BOOST_FILE="$boost_on" boost_case 1 nbd hostname=127.0.0.1 port="$port"
grep -q 'min-free-kbytes (vm\.min_free_kbytes is 1970' "$tmp/case.log" ||
  fail "both settings low: the one line does not name both"
THROTTLE_BOOST_FILE="$tmp/none" boost_case 0 memory 1M throttle-remote=true
grep -q "throttle: cannot read $tmp/none: .*not checking vm\.watermark_boost_factor" \
  "$tmp/case.log" || { cat "$tmp/case.log"; fail "no debug line of the unreadable boost file"; }
echo "ok: watermark boosting: a reason with remote storage only, one line with min_free"

start_refused "throttle-remote=maybe: expected auto, true or false" \
  throttle-remote=maybe
stop_nbdkit $storage
echo "test-remote: PASS"
