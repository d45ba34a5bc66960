#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap units and their helper, on the host: systemd-analyze verify
# accepts the unit as built (and would report a mistake in it), the
# unit has the order, dependencies and privileges swap needs, and the
# helper refuses a bad configuration with a message naming the mistake
# and prints the command lines a good one gives, and for remote storage
# raises vm.min_free_kbytes (a file standing in for it).  What the
# command lines do is the guest test's business (tests/swap/,
# configuration units-*).
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
: "${THROTTLE_SWAP_UNIT:?THROTTLE_SWAP_UNIT must point to the built unit}"
: "${THROTTLE_SWAP_HELPER:?THROTTLE_SWAP_HELPER must point to the built helper}"
requires_file "$THROTTLE_SWAP_UNIT"
requires_file "$THROTTLE_SWAP_HELPER"
requires systemd-analyze --version

unit=$THROTTLE_SWAP_UNIT
helper=$THROTTLE_SWAP_HELPER

# --- systemd-analyze verify ----------------------------------------------
# verify checks that every Exec command exists: point the unit at the
# built helper, the only difference from the file that is installed.
installed=$(sed -n 's/^ExecStart=\([^ ]*\) start %i$/\1/p' "$unit")
[ -n "$installed" ] || fail "no 'ExecStart=HELPER start %i' in $unit"
mkdir "$tmp/units"
sed "s|$installed|$helper|g" "$unit" > "$tmp/units/nbdkit-throttle-swap@.service"
# verify_unit FILE: systemd-analyze verify of an instance; prints what
# it said, and fails on any complaint, warnings included.
verify_unit ()
{
  local dir r=0
  dir=$(dirname "$1")
  systemd-analyze verify --man=no "$dir/nbdkit-throttle-swap@test.service" \
    >"$tmp/verify.out" 2>&1 || r=$?
  cat "$tmp/verify.out"
  [ $r = 0 ] && [ ! -s "$tmp/verify.out" ]
}
verify_unit "$tmp/units/nbdkit-throttle-swap@.service" ||
  fail "systemd-analyze verify complained about the unit"
echo "ok: systemd-analyze verify accepts nbdkit-throttle-swap@test.service"

# The check can fail: a misspelt key, and an ordering cycle (swap
# needed before sysinit.target with the default dependencies).
mkdir "$tmp/bad1" "$tmp/bad2"
sed 's/^OOMScoreAdjust=/OOMScoreAdjustt=/' "$tmp/units/nbdkit-throttle-swap@.service" \
  > "$tmp/bad1/nbdkit-throttle-swap@.service"
! verify_unit "$tmp/bad1/nbdkit-throttle-swap@.service" ||
  fail "systemd-analyze verify accepted a misspelt key"
sed 's/^DefaultDependencies=no$/After=sysinit.target/' \
  "$tmp/units/nbdkit-throttle-swap@.service" > "$tmp/bad2/nbdkit-throttle-swap@.service"
grep -q '^After=sysinit.target' "$tmp/bad2/nbdkit-throttle-swap@.service" ||
  fail "the cycle case was not made"
! verify_unit "$tmp/bad2/nbdkit-throttle-swap@.service" ||
  fail "systemd-analyze verify accepted an ordering cycle"
grep -q "Found ordering cycle" "$tmp/verify.out" ||
  fail "systemd-analyze verify: no ordering cycle reported"
echo "ok: systemd-analyze verify reports a misspelt key and an ordering cycle"

# --- what swap needs of the unit -----------------------------------------
# has LINE: the unit has exactly this line.
has ()
{
  grep -qxF "$1" "$unit" || fail "$unit: no line '$1'"
  echo "ok: $1"
}
has "DefaultDependencies=no"
has "Wants=modprobe@nbd.service"
has "After=modprobe@nbd.service local-fs.target systemd-sysusers.service"
has "Before=swap.target shutdown.target"
has "Conflicts=shutdown.target"
has "WantedBy=swap.target"
has "Type=forking"
has "PIDFile=/run/nbdkit-throttle/%i/nbdkit.pid"
has "AmbientCapabilities=CAP_SYS_RESOURCE CAP_SYS_NICE CAP_IPC_LOCK"
has "CapabilityBoundingSet=CAP_SYS_RESOURCE CAP_SYS_NICE CAP_IPC_LOCK"
has "LimitMEMLOCK=infinity"
has "OOMScoreAdjust=-1000"
has "User=nbdkit-throttle"
# The prepare, start, attach and stop steps, in this order, all the
# helper's.
grep '^Exec' "$unit" | sed "s|$installed|HELPER|" > "$tmp/exec"
printf '%s\n' "ExecStartPre=+HELPER prepare %i" "ExecStart=HELPER start %i" \
  "ExecStartPost=+HELPER attach %i" "ExecStop=+HELPER detach %i" |
  diff -u - "$tmp/exec" ||
  fail "the unit's Exec lines are not prepare, start, attach, detach"
echo "ok: Exec lines: prepare (privileged), start, then attach (privileged), stop: detach (privileged)"

# --- the helper ------------------------------------------------------------
export NBDKIT_THROTTLE_CONFDIR=$tmp/conf
mkdir "$tmp/conf"

# expect RC PATTERN ARGS...
expect ()
{
  local rc=$1 pattern=$2 r=0; shift 2
  "$helper" "$@" >"$tmp/out" 2>&1 || r=$?
  [ "$r" = "$rc" ] || { cat "$tmp/out"; fail "helper $*: exit $r, expected $rc"; }
  grep -q -- "$pattern" "$tmp/out" ||
    { cat "$tmp/out"; fail "helper $*: no '$pattern' in its output"; }
  echo "ok: helper $* -> $r: $(grep -m1 -- "$pattern" "$tmp/out")"
}
conf ()
{
  printf '%s\n' "$@" > "$tmp/conf/t.conf"
}

expect 2 "usage: nbdkit-throttle-swap prepare|start|attach|detach|print INSTANCE" start
expect 2 "usage" frob t
expect 1 'bad instance name "a/b"' print a/b
expect 1 "$tmp/conf/none.conf: cannot read the configuration of instance \"none\"" start none
conf "DISK=/dev/vdb"
expect 1 "DEVICE is not set" print t
conf "DEVICE=/dev/sda" "DISK=/dev/vdb"
expect 1 "DEVICE=/dev/sda: expected an NBD device" print t
conf "DEVICE=/dev/nbd0"
expect 1 "neither DISK nor REMOTE is set" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "REMOTE=nbd://storage.example.com"
expect 1 "DISK and REMOTE are both set" print t
for r in "storage.example.com" "storage.example.com:0" \
         "storage.example.com:65536" "fd00::1:10809" "http://storage/disk" \
         "nbd://"; do
  conf "DEVICE=/dev/nbd0" "REMOTE=$r"
  expect 1 "REMOTE=$r: expected an NBD URI" print t
done
conf "DEVICE=/dev/nbd0" "REMOTE=nbd+unix:///?socket=/run/s.sock"
expect 1 "REMOTE=nbd+unix:///?socket=/run/s.sock: a local socket is not remote storage" print t
conf "DEVICE=/dev/nbd0" 'REMOTE=nbd://storage$(reboot)'
expect 1 "without blanks, quotes or shell characters" print t
conf "DEVICE=/dev/nbd0" "DISK=vdb"
expect 1 "DISK=vdb: expected an absolute path" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "SIZE=1G"
expect 1 "t.conf:3: unknown key \"SIZE\"" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "just words"
expect 1 "t.conf:3: expected KEY=VALUE" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "CONNECTIONS=0"
expect 1 "CONNECTIONS=0: expected a number of connections from 1 to 99" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "MODE=fast"
expect 1 "MODE=fast: expected writethrough or writeback" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "CAPACITY=1M;reboot"
expect 1 "CAPACITY=1M;reboot: expected a size" print t
# The filter refuses a parameter given twice: NBDKIT_ARGS repeating one
# the helper gives is refused first, naming the configuration's key.
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "NBDKIT_ARGS=pool=32 throttle-swap=auto"
expect 1 "NBDKIT_ARGS: throttle-swap=auto: set by nbdkit-throttle-swap itself" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "CAPACITY=8M" "NBDKIT_ARGS=throttle-capacity=4M"
expect 1 "NBDKIT_ARGS: throttle-capacity=4M: CAPACITY=8M gives it already" print t
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "MODE=writeback" "NBDKIT_ARGS=throttle-mode=writethrough"
expect 1 "NBDKIT_ARGS: throttle-mode=writethrough: MODE=writeback gives it already" print t
# NBDKIT_ARGS is split into words, never globbed: a '*' reaches nbdkit
# as it is, not as the files of the current directory.
conf "DEVICE=/dev/nbd0" "DISK=/dev/vdb" "NBDKIT_ARGS=-D throttle.verbose=1 *"
mkdir "$tmp/cwd" && touch "$tmp/cwd/a-file" "$tmp/cwd/b-file"
(cd "$tmp/cwd" && "$helper" print t) > "$tmp/out" 2>&1 ||
  { cat "$tmp/out"; fail "print with a '*' in NBDKIT_ARGS failed"; }
grep -q '^start: .* throttle-control=/run/nbdkit-throttle/t/control throttle-swap=on -D throttle.verbose=1 \*$' "$tmp/out" ||
  { cat "$tmp/out"; fail "NBDKIT_ARGS: '*' was globbed"; }
echo "ok: NBDKIT_ARGS: '*' is passed on as it is"

conf "DEVICE=/dev/nbd0" "DISK=$tmp/none.img"
NBDKIT_THROTTLE_DISK_WAIT=1 timeout 60 "$helper" start t >"$tmp/out" 2>&1 &&
  fail "start with a missing DISK succeeded"
grep -q "DISK=$tmp/none.img does not exist (waited 1 s)" "$tmp/out" ||
  { cat "$tmp/out"; fail "start with a missing DISK: no message"; }
echo "ok: start with a missing DISK: $(cat "$tmp/out")"

# A good configuration: comments, quotes, every key.
conf "# swap on the second disk" "" "DEVICE=/dev/nbd3" 'DISK="/dev/vdb"' \
  "CAPACITY=8M" "CONNECTIONS=2" "MODE=writeback" "SWAP_PRIORITY=5" \
  "NBDKIT_ARGS='pool=32 -D throttle.verbose=1'"
expect 0 "" print t
cat "$tmp/out"
cat > "$tmp/want" <<EOF
start:  nbdkit -U /run/nbdkit-throttle/t/nbd.sock -P /run/nbdkit-throttle/t/nbdkit.pid --filter=throttle throttle-disk file=/dev/vdb throttle-control=/run/nbdkit-throttle/t/control throttle-swap=on throttle-capacity=8M throttle-mode=writeback pool=32 -D throttle.verbose=1
attach: nbd-client -unix /run/nbdkit-throttle/t/nbd.sock /dev/nbd3 -N "" -swap -b 4096 -C 2
        mkswap /dev/nbd3
        swapon -p 5 /dev/nbd3
order:  /run/systemd/system/dev-nbd3.swap.d/50-nbdkit-throttle-t.conf (under systemd):
        [Unit]
        After=nbdkit-throttle-swap@t.service
detach: swapoff /dev/nbd3 (or wait for another swapoff, at most 540 s)
        nbd-client -d /dev/nbd3
EOF
diff -u "$tmp/want" "$tmp/out" || fail "print: not the expected command lines"

# --- the order against systemd's own swap unit ------------------------------
# systemd's dev-nbd3.swap, as it makes it from /proc/swaps (with its
# default dependencies written out: in a container verify leaves them
# out), and the drop-in attach writes: no cycle, and the swap unit is
# ordered after the instance, so that at shutdown its swapoff comes
# first.
mkdir -p "$tmp/units/dev-nbd3.swap.d"
printf '%s\n' "[Unit]" "Before=swap.target umount.target" \
  "Conflicts=umount.target" "[Swap]" "What=/dev/nbd3" > "$tmp/units/dev-nbd3.swap"
sed -n '/^order:/,/^detach:/p' "$tmp/out" | sed '1d;$d;s/^        //' \
  > "$tmp/units/dev-nbd3.swap.d/50-nbdkit-throttle-t.conf"
grep -qx 'After=nbdkit-throttle-swap@t.service' "$tmp/units/dev-nbd3.swap.d/50-nbdkit-throttle-t.conf" ||
  fail "the drop-in does not order the swap unit after the instance"
r=0
SYSTEMD_UNIT_PATH=$tmp/units: systemd-analyze verify --man=no \
  "$tmp/units/dev-nbd3.swap" "$tmp/units/nbdkit-throttle-swap@t.service" \
  > "$tmp/verify.out" 2>&1 || r=$?
cat "$tmp/verify.out"
[ $r = 0 ] && [ ! -s "$tmp/verify.out" ] ||
  fail "systemd-analyze verify complained about the swap unit with the drop-in"
echo "ok: dev-nbd3.swap after the instance (its drop-in): verify accepts it"

# --- remote storage ---------------------------------------------------------
# REMOTE: nbdkit's nbd plugin with the filter in front, a URI as it is
# or HOST:PORT as hostname= and port=; and the step before start that
# raises vm.min_free_kbytes and turns watermark boosting off
# (NBDKIT_THROTTLE_MIN_FREE and NBDKIT_THROTTLE_BOOST_FACTOR stand in
# the files).
export NBDKIT_THROTTLE_MIN_FREE=$tmp/min_free
export NBDKIT_THROTTLE_BOOST_FACTOR=$tmp/boost
echo 0 > "$tmp/boost"
conf "DEVICE=/dev/nbd1" "REMOTE=nbd://storage.example.com:10810/swap"
expect 0 "" print t
cat "$tmp/out"
cat > "$tmp/want" <<EOF
prepare: echo 16384 > $tmp/min_free (if it holds less)
         echo 0 > $tmp/boost (if it holds more)
start:  nbdkit -U /run/nbdkit-throttle/t/nbd.sock -P /run/nbdkit-throttle/t/nbdkit.pid --filter=throttle nbd uri=nbd://storage.example.com:10810/swap throttle-control=/run/nbdkit-throttle/t/control throttle-swap=on
EOF
head -n 3 "$tmp/out" | diff -u "$tmp/want" - ||
  fail "print, REMOTE=URI: not the expected prepare and start lines"
for r in "storage.example.com:10809 storage.example.com" \
         "[fd00::1]:10809 fd00::1"; do
  conf "DEVICE=/dev/nbd1" "REMOTE=${r% *}"
  expect 0 "^start:  .* --filter=throttle nbd hostname=${r#* } port=10809 throttle-control=" print t
done

# prepare (the unit's ExecStartPre) raises the setting to 16384 if
# lower, saying so on stderr, and only for REMOTE; it never lowers it.
conf "DEVICE=/dev/nbd1" "REMOTE=storage.example.com:10809"
echo 1970 > "$tmp/min_free"
r=0
"$helper" prepare t >"$tmp/out" 2>"$tmp/err" || r=$?
cat "$tmp/out" "$tmp/err"
[ $r = 0 ] || fail "prepare: exit $r"
[ "$(cat "$tmp/min_free")" = 16384 ] ||
  fail "prepare: vm.min_free_kbytes is $(cat "$tmp/min_free"), not 16384"
grep -qxF 'nbdkit-throttle-swap: vm.min_free_kbytes raised from 1970 to 16384 for swap over a network (REMOTE=storage.example.com:10809)' \
  "$tmp/err" || fail "prepare: no message on stderr of the raise"
[ ! -s "$tmp/out" ] || fail "prepare: wrote on stdout"
echo "ok: prepare: 1970 raised to 16384, said on stderr"
# Watermark boosting: set to 0 for REMOTE, saying so; left alone at 0.
echo 15000 > "$tmp/boost"
r=0
"$helper" prepare t >"$tmp/out" 2>"$tmp/err" || r=$?
[ $r = 0 ] || { cat "$tmp/out" "$tmp/err"; fail "prepare, boost 15000: exit $r"; }
[ "$(cat "$tmp/boost")" = 0 ] ||
  fail "prepare: vm.watermark_boost_factor is $(cat "$tmp/boost"), not 0"
grep -qxF 'nbdkit-throttle-swap: vm.watermark_boost_factor set from 15000 to 0 for swap over a network (REMOTE=storage.example.com:10809)' \
  "$tmp/err" || { cat "$tmp/err"; fail "prepare: no message on stderr of the boost"; }
echo "ok: prepare: watermark boost factor 15000 set to 0, said on stderr"
# quiet_prepare VALUE: prepare exits 0, says nothing and leaves the
# setting at VALUE.
quiet_prepare ()
{
  local r=0
  "$helper" prepare t >"$tmp/out" 2>&1 || r=$?
  [ $r = 0 ] || { cat "$tmp/out"; fail "prepare, $1: exit $r"; }
  [ ! -s "$tmp/out" ] || { cat "$tmp/out"; fail "prepare, $1: said something"; }
  [ "$(cat "$tmp/min_free")" = "$1" ] ||
    fail "prepare changed $1 to $(cat "$tmp/min_free")"
}
for v in 16384 32768; do
  echo $v > "$tmp/min_free"
  quiet_prepare $v
done
echo 1970 > "$tmp/min_free"
echo 15000 > "$tmp/boost"
conf "DEVICE=/dev/nbd1" "DISK=/dev/vdb"
quiet_prepare 1970
[ "$(cat "$tmp/boost")" = 15000 ] || fail "prepare changed the boost factor for DISK"
echo 0 > "$tmp/boost"
echo "ok: prepare leaves 16384 and 32768 alone, and changes nothing for DISK"
conf "DEVICE=/dev/nbd1" "REMOTE=storage.example.com:10809"
echo many > "$tmp/min_free"
expect 1 '"many" is not a number' prepare t
rm "$tmp/min_free"
expect 1 "cannot read vm.min_free_kbytes ($tmp/min_free)" prepare t
echo 16384 > "$tmp/min_free"
echo lots > "$tmp/boost"
expect 1 '"lots" is not a number' prepare t
rm "$tmp/boost"
quiet_prepare 16384
echo "ok: a kernel without vm.watermark_boost_factor: nothing to set"
unset NBDKIT_THROTTLE_MIN_FREE NBDKIT_THROTTLE_BOOST_FACTOR

# --- detach waits for whoever swaps off --------------------------------------
# A stand-in /proc/swaps and swapoff, nbd-client: swapoff fails as it
# does while systemd is swapping the device off (EINVAL, exit 255), and
# the device leaves the table 2 s later.  detach must wait for that, not
# fail; and fail, leaving the device attached, when it never leaves.
mkdir "$tmp/bin"
printf '%s\n' '#!/bin/sh' 'echo "swapoff: $1: swapoff failed: Invalid argument" >&2' 'exit 255' \
  > "$tmp/bin/swapoff"
printf '%s\n' '#!/bin/sh' 'echo "nbd-client $*" >> "$NBD_LOG"' > "$tmp/bin/nbd-client"
chmod +x "$tmp/bin/swapoff" "$tmp/bin/nbd-client"
conf "DEVICE=/dev/nbd3" "DISK=/dev/vdb"
printf '%s\n' "Filename Type Size Used Priority" \
  "/dev/nbd3 partition 102396 51200 -2" > "$tmp/swaps"
( sleep 2; echo "Filename Type Size Used Priority" > "$tmp/swaps.new";
  mv "$tmp/swaps.new" "$tmp/swaps" ) &
t0=$(date +%s.%N)
r=0
PATH=$tmp/bin:$PATH NBDKIT_THROTTLE_PROC_SWAPS=$tmp/swaps NBD_LOG=$tmp/nbd.log \
  NBDKIT_THROTTLE_SWAPOFF_WAIT=60 timeout 120 "$helper" detach t > "$tmp/out" 2>&1 || r=$?
t1=$(date +%s.%N)
wait
cat "$tmp/out"
[ $r = 0 ] || fail "detach while another swapoff runs: exit $r"
grep -q 'swapoff failed (exit 255): waiting until /dev/nbd3 leaves /proc/swaps' "$tmp/out" ||
  fail "detach: no message that it waits"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a >= 2) }' ||
  fail "detach returned before the device left the swap table"
echo "ok: detach waited $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s for another swapoff"
printf '%s\n' "Filename Type Size Used Priority" \
  "/dev/nbd3 partition 102396 51200 -2" > "$tmp/swaps"
: > "$tmp/nbd.log"
r=0
PATH=$tmp/bin:$PATH NBDKIT_THROTTLE_PROC_SWAPS=$tmp/swaps NBD_LOG=$tmp/nbd.log \
  NBDKIT_THROTTLE_SWAPOFF_WAIT=1 timeout 120 "$helper" detach t > "$tmp/out" 2>&1 || r=$?
cat "$tmp/out"
[ $r = 1 ] || fail "detach with the device never leaving: exit $r, not 1"
grep -q '/dev/nbd3 is still active swap after 1 s: leaving it attached' "$tmp/out" ||
  fail "detach timeout: no message"
[ ! -s "$tmp/nbd.log" ] || fail "detach timeout: ran $(cat "$tmp/nbd.log")"
echo "ok: detach gives up after NBDKIT_THROTTLE_SWAPOFF_WAIT, leaving the device attached"
echo "test-units: PASS"
