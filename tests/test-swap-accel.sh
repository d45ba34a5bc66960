#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap guest test's choice of accelerator (swap_accel in
# tests/swap/common.sh), on the host, without KVM: kvm only where the
# device is a character device this user may read and write and qemu
# starts a KVM machine on it, else tcg with the reason; SWAP_ACCEL
# forces either, and a forced kvm that cannot be had is an error.  A
# stand-in qemu and device (a copy of /dev/null's node) play the
# machine that has KVM.
. "${abs_srcdir:-$(dirname "$0")}/functions.sh"
. "$srcdir/swap/common.sh"

requires_root "mknod for the stand-in device"
# Traversable: a case runs as nobody.
chmod 711 "$tmp"
mknod "$tmp/kvm" c 1 3
chmod 666 "$tmp/kvm"
printf '%s\n' '#!/bin/sh' 'echo "$*" > "${0%/*}/args"; cat > /dev/null; exit 0' > "$tmp/qemu-ok"
printf '%s\n' '#!/bin/sh' 'cat > /dev/null; echo "Could not access KVM kernel module" >&2; exit 1' > "$tmp/qemu-bad"
chmod +x "$tmp/qemu-ok" "$tmp/qemu-bad"

# check WANT-RC WANT-LINE-PATTERN VAR=VALUE...
check ()
{
  local rc=$1 pat=$2 out r=0; shift 2
  out=$(env "$@" bash -c '. "$1"; swap_accel' sh "$srcdir/swap/common.sh") || r=$?
  [ "$r" = "$rc" ] || fail "$*: exit $r, not $rc ($out)"
  [[ $out =~ $pat ]] || fail "$*: '$out' does not match '$pat'"
  echo "ok: $* -> $out"
}

check 0 '^kvm .* usable$' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok"
grep -q -- '-accel kvm -machine none' "$tmp/args" || fail "the probe did not ask qemu for KVM: $(cat "$tmp/args")"
check 0 '^tcg no /nonexistent/kvm$' SWAP_KVM_DEV=/nonexistent/kvm SWAP_QEMU="$tmp/qemu-ok"
check 0 '^tcg no '"$tmp"'/qemu-ok$' SWAP_KVM_DEV="$tmp/qemu-ok" SWAP_QEMU="$tmp/qemu-ok"
check 0 '^tcg qemu -accel kvm fails on ' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-bad"
chmod 600 "$tmp/kvm"
check 0 '^tcg .* is not readable and writable by nobody$' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok" \
  setpriv --reuid=65534 --regid=65534 --clear-groups
check 0 '^tcg SWAP_ACCEL=tcg$' SWAP_ACCEL=tcg SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok"
check 1 '^none SWAP_ACCEL=kvm, but no /nonexistent/kvm$' SWAP_ACCEL=kvm SWAP_KVM_DEV=/nonexistent/kvm
check 1 '^none SWAP_ACCEL=fast: expected kvm or tcg$' SWAP_ACCEL=fast
echo "this machine: $(swap_accel || :)"
