#!/bin/bash
# nbdkit-throttle: one entry point for a fresh Debian 12 machine.
#
#   ./dev.sh demo     install what is missing, build, run the main job
#   ./dev.sh check    install what is missing, build, run every test
#   ./dev.sh bench    install what is missing, build, run the benchmarks
#   ./dev.sh deps     only install what is missing
#
# Builds out of tree in ./build (THROTTLE_BUILDDIR to change).
set -euo pipefail

top=$(cd "$(dirname "$0")" && pwd)
builddir=${THROTTLE_BUILDDIR:-$top/build}

# Every Debian package the build, the tests, the guest test and the
# benchmarks use.
PACKAGES=(
  build-essential autoconf automake libtool pkg-config perl bc python3
  nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin python3-libnbd
  libev-dev check
  fio qemu-utils
  qemu-system-x86 linux-image-amd64 busybox-static nbd-client
  cpio xz-utils zstd kmod strace libcap2-bin
  systemd
  gnuplot-nox
)

deps ()
{
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]}"
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
}

build ()
{
  cd "$top"
  autoreconf -fi >"$top/autoreconf.log" 2>&1 ||
    { cat "$top/autoreconf.log"; exit 1; }
  mkdir -p "$builddir"
  cd "$builddir"
  [ -f Makefile ] || "$top/configure" -q ${THROTTLE_CONFIGURE_ARGS:-}
  make -j"$(nproc)" >/dev/null
}

demo ()
{
  local sock=$builddir/demo.sock ctl=$builddir/demo.ctl log=$builddir/demo.log
  local filter=$builddir/plugin/.libs/nbdkit-throttle-filter.so
  rm -f "$sock" "$ctl"
  echo "== nbdkit --filter=throttle memory 1G throttle-capacity=1M"
  echo "   driven by throttle-load: 4 connections x 32 requests, 90% 4K + 10% 1M writes, 10 s"
  nbdkit -f -v -U "$sock" --filter="$filter" memory 1G \
    throttle-capacity=1M throttle-control="$ctl" >"$log" 2>&1 &
  local pid=$!
  trap 'kill $pid 2>/dev/null || :' EXIT
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  # --control: after the run, the throttle's own account of it.
  "$builddir/tools/throttle-load" --unix "$sock" --connections 4 \
    --queue-depth 32 --block-size 4k:90,1M:10 --read-ratio 0 --random \
    --duration 10 --verify --control "$ctl"
  kill $pid; wait $pid 2>/dev/null || :
  trap - EXIT
  grep "throttle: summary" "$log" | sed 's/^.*throttle: /== nbdkit at exit: /'
}

case "${1:-}" in
  deps) deps ;;
  demo) deps; build; demo ;;
  check)
    deps; build
    cd "$builddir"
    make check
    # The short name --filter=throttle works once installed.
    make install >/dev/null
    make installcheck
    # The same unit and integration tests under ASan+UBSan and TSan.
    "$top/tests/run-sanitizers.sh"
    ;;
  bench) deps; build; cd "$builddir"; make bench ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
