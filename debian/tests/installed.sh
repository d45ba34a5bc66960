#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The installed package, from its installed files only: every file is
# the package's, nbdkit finds the filter and the plugin by their short
# names, throttle-load drives the filter and throttle-ctl reads and
# changes it, the unit passes systemd-analyze verify with its man pages
# and helper in place, and the service's user exists.
set -euo pipefail

tmp=$(mktemp -d /var/tmp/throttle-installed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail () { echo "installed.sh: FAIL: $*" >&2; exit 1; }

# /usr/local (a make install) must not stand in for the package.
for f in /usr/bin/throttle-ctl /usr/bin/throttle-load \
         /usr/libexec/nbdkit-throttle/nbdkit-throttle-swap \
         /lib/systemd/system/nbdkit-throttle-swap@.service \
         /usr/include/nbdkit-throttle-metric.h \
         /usr/share/man/man1/throttle-ctl.1.gz \
         /usr/share/man/man1/nbdkit-throttle-filter.1.gz \
         /usr/share/man/man1/nbdkit-throttle-design.1.gz \
         /usr/share/man/man1/nbdkit-throttle-disk-plugin.1.gz \
         "$(nbdkit --dump-config | sed -n 's/^filterdir=//p')/nbdkit-throttle-filter.so" \
         "$(nbdkit --dump-config | sed -n 's/^plugindir=//p')/nbdkit-throttle-disk-plugin.so"; do
  dpkg -S "$f" >/dev/null 2>&1 || fail "$f is not installed by a package"
done
echo "ok: every file checked belongs to the package"

# The dependency on exactly the nbdkit it was built for.
dep=$(dpkg-query -W -f='${Depends}' nbdkit-throttle)
v=$(nbdkit --version | awk '{ print $2 }')
case "$dep" in
  *"nbdkit (>= $v), nbdkit (<< $v.~)"*) echo "ok: Depends: $dep" ;;
  *) fail "Depends does not pin nbdkit $v: $dep" ;;
esac

# The filter by its short name, driven by throttle-load, read and
# changed by throttle-ctl, all from /usr/bin.
ctl=$tmp/ctl
nbdkit -U - --filter=throttle memory 1G throttle-capacity=1M \
  throttle-control="$ctl" throttle-rt=off \
  --run "/usr/bin/throttle-load --unix \"\$unixsocket\" -c 2 -q 8 \
           -b 4k:90,1M:10 --read-ratio 0 -t 2 --verify --control $ctl &&
         /usr/bin/throttle-ctl $ctl stats &&
         /usr/bin/throttle-ctl $ctl set capacity '' 2M &&
         /usr/bin/throttle-ctl --json $ctl stats '' &&
         /usr/bin/throttle-ctl $ctl metrics" > "$tmp/run.out" 2>&1 ||
  { cat "$tmp/run.out"; fail "nbdkit --filter=throttle with throttle-load and throttle-ctl"; }
cat "$tmp/run.out"
grep -q '^verify: .* 0 bad blocks' "$tmp/run.out" || fail "throttle-load: no clean verify"
grep -q '^""  *1M ' "$tmp/run.out" || fail "throttle-ctl stats: no row for the default export at 1M"
grep -q 'capacity 2097152 (2M), was 1048576 (1M)' "$tmp/run.out" || fail "throttle-ctl set capacity"
grep -q '"name":"","capacity":2097152' "$tmp/run.out" || fail "throttle-ctl --json stats after the change"
grep -q '^nbdkit_throttle_capacity_units{export=""} 2097152$' "$tmp/run.out" || fail "throttle-ctl metrics after the change"
grep -q '^nbdkit: throttle: summary export="" capacity=2097152 ' "$tmp/run.out" || fail "no summary at exit"
echo "ok: nbdkit --filter=throttle memory 1G, throttle-load and throttle-ctl from the package"

# The disk plugin by its short name.
nbdkit throttle-disk --dump-plugin | grep -q '^name=throttle-disk$' ||
  fail "nbdkit throttle-disk: the plugin does not load"
echo "ok: nbdkit throttle-disk loads"

# The unit as installed: its helper, its man pages, its user.
systemd-analyze verify /lib/systemd/system/nbdkit-throttle-swap@ci.service \
  > "$tmp/verify.out" 2>&1 || { cat "$tmp/verify.out"; fail "systemd-analyze verify"; }
[ ! -s "$tmp/verify.out" ] || { cat "$tmp/verify.out"; fail "systemd-analyze verify complained"; }
echo "ok: systemd-analyze verify nbdkit-throttle-swap@ci.service"
getent passwd nbdkit-throttle >/dev/null || fail "no user nbdkit-throttle"
[ -d /etc/nbdkit-throttle ] || fail "no /etc/nbdkit-throttle"
echo "ok: user nbdkit-throttle and /etc/nbdkit-throttle exist"
echo "installed.sh: PASS"
