#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap guest test's choice of accelerator (swap_accel in
# tests/swap/common.sh), on the host, without KVM: kvm only where the
# device is a character device this user may read and write, qemu
# starts a KVM machine on it and a canary guest boots on it (its init
# prints a marker within the bound), else tcg with the reason;
# SWAP_ACCEL forces either, and a forced kvm that cannot be had is an
# error.  Stand-in qemus and a stand-in device (a copy of /dev/null's
# node) play the machines: one with a working KVM, one whose qemu fails
# on it, one whose KVM starts -machine none but boots no guest (the
# kernel stops after SeaBIOS), one whose qemu dies during the boot.
#
# Hermetic: no SWAP_* variable of the caller reaches swap_accel, so a
# caller's SWAP_ACCEL=tcg (or a SWAP_QEMU) cannot change a verdict.
for v in $(compgen -v SWAP_); do
  unset "$v"
done
. "${abs_srcdir:-$(dirname "$0")}/functions.sh"
. "$srcdir/swap/common.sh"

requires_root "mknod for the stand-in device"
# Traversable: a case runs as nobody.
chmod 711 "$tmp"
mknod "$tmp/kvm" c 1 3
chmod 666 "$tmp/kvm"
: > "$tmp/vmlinuz"
: > "$tmp/initrd"
chmod 644 "$tmp/vmlinuz" "$tmp/initrd"

# stand_in NAME BOOT-BODY: a qemu whose -machine none probe passes and
# whose boot (a command line with -kernel) runs BOOT-BODY, its
# arguments recorded in NAME.args.
stand_in ()
{
  cat > "$tmp/$1" <<EOF
#!/bin/sh
case " \$* " in
  *" -machine none "*) cat > /dev/null; exit 0 ;;
esac
echo "\$*" > "\${0}.args"
$2
EOF
  chmod 755 "$tmp/$1"
}
stand_in qemu-ok 'echo "SeaBIOS"; echo "[    0.0] Linux version"; printf "SWAP-CANARY-BOOTED\r\n"; exit 0'
# What this machine kind's nested KVM does: the firmware runs, the
# kernel never prints, qemu never exits.
stand_in qemu-noboot 'echo "Probing EDD (edd=off to disable)... ok"; printf "\033c\033[?7l\033[2J"; echo $$ > "${0}.pid"; exec sleep 600'
stand_in qemu-dies 'echo "qemu-system-x86_64: failed to set MSR 0x4b564d06" >&2; exit 1'
printf '%s\n' '#!/bin/sh' 'cat > /dev/null; echo "Could not access KVM kernel module" >&2; exit 1' > "$tmp/qemu-bad"
chmod 755 "$tmp/qemu-bad"

# check WANT-RC WANT-LINE-PATTERN VAR=VALUE...: swap_accel with the
# stand-in kernel and initramfs, a 3 s canary bound and VAR=VALUE...
check ()
{
  local rc=$1 pat=$2 out r=0; shift 2
  out=$(env SWAP_CANARY_SECS=3 "$@" bash -c '. "$1"; swap_accel "$2" "$3"' sh \
          "$srcdir/swap/common.sh" "$tmp/vmlinuz" "$tmp/initrd") || r=$?
  [ "$r" = "$rc" ] || fail "$*: exit $r, not $rc ($out)"
  [[ $out =~ $pat ]] || fail "$*: '$out' does not match '$pat'"
  echo "ok: $* -> $out"
}

check 0 '^kvm .* usable: the canary guest booted in [0-9.]+ s$' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok"
# The canary boots the test's own kernel and initramfs under KVM and
# asks its init for the marker.
for a in '-accel kvm' "-kernel $tmp/vmlinuz" "-initrd $tmp/initrd" 'thr.canary=1' 'rootfstype=ramfs'; do
  grep -q -- "$a" "$tmp/qemu-ok.args" || fail "the canary's command line lacks '$a': $(cat "$tmp/qemu-ok.args")"
done
# A KVM that starts a machine but boots no guest is TCG, with the
# reason, in the bound: not the suite's boots hanging one by one.
start=$(date +%s)
check 0 "^tcg $tmp/kvm opens, but no guest boots on it: the canary guest printed no marker in 3 s \\(console's last line: 'Probing EDD \\(edd=off to disable\\)\\.\\.\\. ok'\\)$" \
  SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-noboot"
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the canary outlived its bound by far"
! kill -0 "$(cat "$tmp/qemu-noboot.pid")" 2>/dev/null || fail "the canary left its qemu running"
check 0 "^tcg $tmp/kvm opens, but no guest boots on it: qemu exited before the canary guest's marker" \
  SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-dies"
check 1 '^none SWAP_ACCEL=kvm, but .* opens, but no guest boots on it: the canary guest printed no marker' \
  SWAP_ACCEL=kvm SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-noboot"
check 0 '^tcg no /nonexistent/kvm$' SWAP_KVM_DEV=/nonexistent/kvm SWAP_QEMU="$tmp/qemu-ok"
check 0 '^tcg no '"$tmp"'/qemu-ok$' SWAP_KVM_DEV="$tmp/qemu-ok" SWAP_QEMU="$tmp/qemu-ok"
check 0 '^tcg qemu -accel kvm fails on ' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-bad"
rm -f "$tmp/qemu-ok.args" "$tmp/vmlinuz"
check 0 '^tcg .* opens, but no guest boots on it: no kernel or initramfs for the canary' \
  SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok"
[ ! -e "$tmp/qemu-ok.args" ] || fail "the canary booted without a kernel"
: > "$tmp/vmlinuz"
chmod 600 "$tmp/kvm"
check 0 '^tcg .* is not readable and writable by nobody$' SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok" \
  setpriv --reuid=65534 --regid=65534 --clear-groups
chmod 666 "$tmp/kvm"
check 0 '^tcg SWAP_ACCEL=tcg$' SWAP_ACCEL=tcg SWAP_KVM_DEV="$tmp/kvm" SWAP_QEMU="$tmp/qemu-ok"
check 1 '^none SWAP_ACCEL=kvm, but no /nonexistent/kvm$' SWAP_ACCEL=kvm SWAP_KVM_DEV=/nonexistent/kvm
check 1 '^none SWAP_ACCEL=fast: expected kvm or tcg$' SWAP_ACCEL=fast
