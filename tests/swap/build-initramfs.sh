#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the initramfs of the swap-over-NBD test guest.
#
#   build-initramfs.sh WORKDIR
#
# Writes WORKDIR/initramfs.cpio.gz from busybox-static, nbdkit with its
# file, memory and eval plugins, nbd-client, swaptest (compiled here),
# the shared libraries they need (found with ldd) and the kernel modules
# of the installed Debian kernel (nbd, virtio_blk, virtio_net and what
# they depend on); WORKDIR/initramfs-nbd.cpio.gz, the same with nbdkit's
# nbd plugin and libnbd added, for the remote configurations; and
# WORKDIR/relay, which runs on the host (relay.c).
# When the files named by $THROTTLE_FILTER and $THROTTLE_DISK_PLUGIN exist,
# they go in too.  Prints what it left out.

set -euo pipefail

srcdir=$(cd "$(dirname "$0")" && pwd)
. "$srcdir/common.sh"

work=${1:?usage: build-initramfs.sh WORKDIR}
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/root
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,lib/modules,lib64}

kver=$(swap_kernel_version) || { echo "no /boot/vmlinuz-*" >&2; exit 1; }
moddir=/lib/modules/$kver
[ -f "$moddir/modules.dep" ] || { echo "no $moddir/modules.dep" >&2; exit 1; }

# --- busybox: every applet as a link in /bin ---------------------------
busybox=$(command -v busybox)
cp "$busybox" "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"
done

# --- ELF files and their libraries -------------------------------------
# Copy a file to the same path in the guest, resolving symlinks.
put ()
{
    local dst=$root$2
    mkdir -p "$(dirname "$dst")"
    cp -L "$1" "$dst"
}

elves=()
add_elf ()  # add_elf HOSTPATH GUESTPATH
{
    put "$1" "$2"
    elves+=("$1")
}

nbdkit=$(command -v nbdkit)
plugindir=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
add_elf "$nbdkit" /usr/bin/nbdkit
add_elf "$(command -v nbd-client || echo /usr/sbin/nbd-client)" /usr/sbin/nbd-client
# SWAP_PERF=1: perf, for the profile of thr.perf=1 (init.sh).  Only
# then: it takes guest memory.
if [ "${SWAP_PERF:-0}" = 1 ]; then
    perf=$(command -v perf) || { echo "build-initramfs: SWAP_PERF=1 needs perf (apt-get install linux-perf)" >&2; exit 1; }
    add_elf "$perf" /usr/bin/perf
fi
for p in file memory; do
    add_elf "$plugindir/nbdkit-$p-plugin.so" "$plugindir/nbdkit-$p-plugin.so"
done

conf=$root/etc/swaptest.conf
: > "$conf"
# The eval plugin, for thr.forkcheck (init.sh): its scripts run in busybox sh.
if [ -f "$plugindir/nbdkit-eval-plugin.so" ]; then
    add_elf "$plugindir/nbdkit-eval-plugin.so" "$plugindir/nbdkit-eval-plugin.so"
    echo "EVAL_PLUGIN=$plugindir/nbdkit-eval-plugin.so" >> "$conf"
else
    echo "build-initramfs: no eval plugin ($plugindir/nbdkit-eval-plugin.so)"
fi
if [ -n "${THROTTLE_FILTER:-}" ] && [ -f "$THROTTLE_FILTER" ]; then
    add_elf "$THROTTLE_FILTER" /lib/nbdkit-throttle/nbdkit-throttle-filter.so
    echo "FILTER=/lib/nbdkit-throttle/nbdkit-throttle-filter.so" >> "$conf"
else
    echo "build-initramfs: no throttle filter (THROTTLE_FILTER=${THROTTLE_FILTER:-})"
fi
if [ -n "${THROTTLE_DISK_PLUGIN:-}" ] && [ -f "$THROTTLE_DISK_PLUGIN" ]; then
    add_elf "$THROTTLE_DISK_PLUGIN" /lib/nbdkit-throttle/nbdkit-throttle-disk-plugin.so
    echo "DISK_PLUGIN=/lib/nbdkit-throttle/nbdkit-throttle-disk-plugin.so" >> "$conf"
else
    echo "build-initramfs: no disk plugin (THROTTLE_DISK_PLUGIN=${THROTTLE_DISK_PLUGIN:-})"
fi

# The swap unit and its helper (configuration units-*): the guest's init
# runs the unit's Exec lines, which name the helper by its installed
# path, and the helper runs nbdkit with the short names, so the filter
# and the plugin go into nbdkit's own directories as a package puts them.
if [ -n "${THROTTLE_SWAP_UNIT:-}" ] && [ -f "$THROTTLE_SWAP_UNIT" ] &&
   [ -n "${THROTTLE_SWAP_HELPER:-}" ] && [ -f "$THROTTLE_SWAP_HELPER" ] &&
   [ -n "${THROTTLE_FILTER:-}" ] && [ -f "$THROTTLE_FILTER" ] &&
   [ -n "${THROTTLE_DISK_PLUGIN:-}" ] && [ -f "$THROTTLE_DISK_PLUGIN" ]; then
    helper=$(sed -n 's/^ExecStart=\([^ ]*\) start %i$/\1/p' "$THROTTLE_SWAP_UNIT")
    confdir=$(sed -n 's/^confdir=${NBDKIT_THROTTLE_CONFDIR:-\(.*\)}$/\1/p' "$THROTTLE_SWAP_HELPER")
    [ -n "$helper" ] && [ -n "$confdir" ] ||
        { echo "build-initramfs: cannot read the helper's path or confdir" >&2; exit 1; }
    filterdir=$(nbdkit --dump-config | sed -n 's/^filterdir=//p')
    put "$THROTTLE_SWAP_UNIT" /etc/systemd/system/nbdkit-throttle-swap@.service
    put "$THROTTLE_SWAP_HELPER" "$helper"
    chmod 755 "$root$helper"
    add_elf "$THROTTLE_FILTER" "$filterdir/nbdkit-throttle-filter.so"
    add_elf "$THROTTLE_DISK_PLUGIN" "$plugindir/nbdkit-throttle-disk-plugin.so"
    echo "UNIT=/etc/systemd/system/nbdkit-throttle-swap@.service" >> "$conf"
    echo "UNIT_CONFDIR=$confdir" >> "$conf"
else
    echo "build-initramfs: no swap unit (THROTTLE_SWAP_UNIT=${THROTTLE_SWAP_UNIT:-}, THROTTLE_SWAP_HELPER=${THROTTLE_SWAP_HELPER:-})"
fi

# ldd prints "name => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)".
libs=$(for e in "${elves[@]}"; do ldd "$e"; done |
       awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
       sort -u)
# glibc loads libgcc_s at run time for thread cancellation and unwinding.
for l in /lib/x86_64-linux-gnu/libgcc_s.so.1; do
    [ -f "$l" ] && libs="$libs $l"
done
for l in $libs; do
    put "$l" "$l"
done

# --- swaptest, and the host's relay to a remote storage server ----------
gcc -static -O2 -o "$root/usr/bin/swaptest" "$srcdir/swaptest.c"
gcc -static -O2 -o "$work/relay" "$srcdir/relay.c"

# --- kernel modules, dependencies first ----------------------------------
declare -A seen=()
order=()
modpath ()  # the modules.dep path of module NAME
{
    awk -F: -v n="$1" '{ f = $1; sub(/.*\//, "", f); sub(/\.ko(\.(xz|zst|gz))?$/, "", f)
                          gsub(/-/, "_", f) }
                        f == n { print $1; exit }' "$moddir/modules.dep"
}
add_mod ()
{
    local name=$1 path deps d i
    [ -n "${seen[$name]:-}" ] && return 0
    seen[$name]=1
    path=$(modpath "$name")
    if [ -z "$path" ]; then
        # Built into the kernel: nothing to load.
        grep -q "/$name.ko" "$moddir/modules.builtin" 2>/dev/null && return 0
        echo "build-initramfs: module $name not found in $moddir" >&2
        return 1
    fi
    deps=($(awk -F: -v p="$path" '$1 == p { print $2 }' "$moddir/modules.dep"))
    # modprobe loads the last listed dependency first.
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
        d=${deps[$i]##*/}; d=${d%%.ko*}; d=${d//-/_}
        add_mod "$d"
    done
    case "$path" in
        *.ko.xz)  xz -dc "$moddir/$path" > "$root/lib/modules/$name.ko" ;;
        *.ko.zst) zstd -qdc "$moddir/$path" > "$root/lib/modules/$name.ko" ;;
        *.ko.gz)  gzip -dc "$moddir/$path" > "$root/lib/modules/$name.ko" ;;
        *)        cp "$moddir/$path" "$root/lib/modules/$name.ko" ;;
    esac
    order+=("$name")
}
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev \
         virtio_pci virtio_blk virtio_net nbd; do
    if [ "$m" = virtio_pci_legacy_dev ] || [ "$m" = virtio_pci_modern_dev ]; then
        [ -n "$(modpath "$m")" ] || continue
    fi
    add_mod "$m"
done
echo "MODULES='${order[*]}'" >> "$conf"

# --- the remote configurations' addition ----------------------------------
# nbdkit's nbd plugin and what libnbd needs (ICU's data alone is 30 MiB:
# in the other configurations' guests it would be unswappable ramfs
# taken from their memory) go into a second archive, which the kernel
# unpacks after the first: initramfs-nbd.cpio.gz is the two back to
# back, for thr.plugin=nbd (run-guest.sh).
nbdroot=$work/root-nbd
rm -rf "$nbdroot" "$work/initramfs-nbd.cpio.gz"
if [ -f "$plugindir/nbdkit-nbd-plugin.so" ]; then
    mkdir -p "$nbdroot$plugindir"
    cp -L "$plugindir/nbdkit-nbd-plugin.so" "$nbdroot$plugindir/"
    # nbdkit's retry filter, for the storage-restart row (init.sh's
    # thr.retry=1); it needs nothing beyond libc.
    nfilterdir=$(nbdkit --dump-config | sed -n 's/^filterdir=//p')
    if [ -f "$nfilterdir/nbdkit-retry-filter.so" ]; then
        mkdir -p "$nbdroot$nfilterdir"
        cp -L "$nfilterdir/nbdkit-retry-filter.so" "$nbdroot$nfilterdir/"
    fi
    for l in $(ldd "$plugindir/nbdkit-nbd-plugin.so" |
               awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do
        [ -e "$root$l" ] && continue
        mkdir -p "$nbdroot$(dirname "$l")"
        cp -L "$l" "$nbdroot$l"
    done
else
    echo "build-initramfs: no nbd plugin ($plugindir/nbdkit-nbd-plugin.so): no remote configurations"
fi

# --- /init and the archive -------------------------------------------------
cp "$srcdir/init.sh" "$root/init"
chmod 755 "$root/init"

if command -v cpio >/dev/null; then
    cpio_out () { cpio -o -H newc --quiet; }
else
    cpio_out () { busybox cpio -o -H newc 2>/dev/null; }
fi
(cd "$root" && find . | LC_ALL=C sort | cpio_out) | gzip -1 > "$work/initramfs.cpio.gz"
echo "build-initramfs: $work/initramfs.cpio.gz ($(du -sk "$root" | cut -f1) KiB unpacked, kernel $kver, modules: ${order[*]})"
if [ -d "$nbdroot" ]; then
    (cd "$nbdroot" && find . | LC_ALL=C sort | cpio_out) | gzip -1 |
        cat "$work/initramfs.cpio.gz" - > "$work/initramfs-nbd.cpio.gz"
    echo "build-initramfs: $work/initramfs-nbd.cpio.gz (and $(du -sk "$nbdroot" | cut -f1) KiB more: the nbd plugin, libnbd and its libraries)"
fi
