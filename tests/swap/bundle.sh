#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Makes a self-contained directory of the swap-over-NBD guest test, to
# run on another Linux host (one with KVM, where the ratios to raw-disk
# measure the I/O paths rather than emulated CPU; README.md):
#
#   bundle.sh DIR            then, on any x86-64 Linux host:   DIR/run
#
# DIR gets the initramfs (nbdkit, the built filter, disk plugin, unit and
# helper, nbd-client, busybox, swaptest, the kernel's modules), the
# kernel it was built for, swaptest for the host's self-test, the
# relay of the remote configurations (run-guest.sh), this
# directory's scripts and bundle.conf (what went in).  With
# SWAP_BUNDLE_QEMU=1 also qemu-system-x86_64 with its shared libraries,
# loader, accelerator modules and firmware (DIR/qemu), for a host without qemu; else the
# host's qemu is used.  DIR/run takes check-swap.sh's variables
# (SWAP_CONFIGS, SWAP_BOOTS, SWAP_ACCEL, ...); its work directory is
# DIR/swap-work.  Environment: as check-swap.sh (THROTTLE_FILTER,
# THROTTLE_DISK_PLUGIN, THROTTLE_SWAP_UNIT, THROTTLE_SWAP_HELPER).

set -euo pipefail

srcdir=$(cd "$(dirname "$0")" && pwd)
. "$srcdir/common.sh"

dir=${1:?usage: bundle.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
kernel=$(swap_kernel)
[ -n "$kernel" ] || { echo "bundle: no /boot/vmlinuz-*" >&2; exit 1; }

"$srcdir/build-initramfs.sh" "$dir/build"
cp "$dir/build/initramfs.cpio.gz" "$dir/initramfs.cpio.gz"
cp "$dir/build/root/usr/bin/swaptest" "$dir/swaptest"
cp "$dir/build/relay" "$dir/build/initramfs-nbd.cpio.gz" "$dir/"
rm -rf "$dir/build"
cp "$kernel" "$dir/${kernel##*/}"
cp "$srcdir/check-swap.sh" "$srcdir/run-guest.sh" "$srcdir/common.sh" \
   "$srcdir/README.md" "$dir/"
have () { [ -n "${1:-}" ] && [ -f "$1" ] && echo 1 || echo 0; }
units=0
[ "$(have "${THROTTLE_SWAP_UNIT:-}")" = 1 ] &&
    [ "$(have "${THROTTLE_SWAP_HELPER:-}")" = 1 ] && units=1
cat > "$dir/bundle.conf" <<CONF
# What bundle.sh put in (read by check-swap.sh with SWAP_BUNDLE).
BUNDLE_FILTER=$(have "${THROTTLE_FILTER:-}")
BUNDLE_DISK=$(have "${THROTTLE_DISK_PLUGIN:-}")
BUNDLE_UNITS=$units
BUNDLE_KERNEL=${kernel##*/}
BUNDLE_NBDKIT='$(nbdkit --version | head -n 1)'
BUNDLE_MADE='$(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)'
CONF

if [ "${SWAP_BUNDLE_QEMU:-0}" = 1 ]; then
    q=$(command -v qemu-system-x86_64) || { echo "bundle: no qemu-system-x86_64 to bundle" >&2; exit 1; }
    rm -rf "$dir/qemu"
    mkdir -p "$dir/qemu/bin" "$dir/qemu/lib" "$dir/qemu/share"
    cp -L "$q" "$dir/qemu/bin/qemu-system-x86_64.real"
    ldd "$q" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
        while read -r l; do cp -L "$l" "$dir/qemu/lib/"; done
    # The firmware a -kernel boot loads (SeaBIOS, the VGA BIOS, the
    # option ROMs): the files of qemu's data directory and of SeaBIOS's
    # (Debian keeps it apart), links resolved.
    for f in /usr/share/qemu/* /usr/share/seabios/*; do
        [ -f "$f" ] && cp -L "$f" "$dir/qemu/share/"
    done
    [ -f "$dir/qemu/share/bios-256k.bin" ] ||
        { echo "bundle: no bios-256k.bin (Debian: seabios)" >&2; exit 1; }
    # Debian builds the TCG accelerator as a module: qemu's module
    # directory goes too (QEMU_MODULE_DIR), with what its modules need.
    mkdir -p "$dir/qemu/modules"
    for m in /usr/lib/*/qemu/accel-*.so; do
        [ -f "$m" ] || continue
        cp -L "$m" "$dir/qemu/modules/"
        ldd "$m" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
            while read -r l; do cp -nL "$l" "$dir/qemu/lib/"; done
    done
    loader=$(basename "$(ldd "$q" | awk '$1 ~ /^\/.*ld-linux/ { print $1 }')")
    cat > "$dir/qemu/bin/qemu-system-x86_64" <<WRAP
#!/bin/sh
# The bundled qemu, through the bundled loader and libraries.
d=\$(cd "\$(dirname "\$0")/.." && pwd)
QEMU_MODULE_DIR=\$d/modules
export QEMU_MODULE_DIR
exec "\$d/lib/$loader" --library-path "\$d/lib" "\$d/bin/qemu-system-x86_64.real" -L "\$d/share" "\$@"
WRAP
    chmod +x "$dir/qemu/bin/qemu-system-x86_64"
fi

cat > "$dir/run" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled swap-over-NBD guest test (check-swap.sh; see
# README.md).  Variables: SWAP_CONFIGS, SWAP_BOOTS, SWAP_ACCEL, ...
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/qemu/bin/qemu-system-x86_64" ] && PATH=$here/qemu/bin:$PATH
export SWAP_BUNDLE=$here abs_builddir=$here
exec "$here/check-swap.sh" "$@"
RUN
chmod +x "$dir/run"
echo "bundle: $dir ($(du -sh "$dir" | cut -f1)): run $dir/run"
