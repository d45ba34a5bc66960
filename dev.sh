#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# nbdkit-throttle: one entry point for a fresh Debian 12 machine.
#
#   ./dev.sh demo     install what is missing, build, run the main job
#   ./dev.sh check    install what is missing, build, run every test
#   ./dev.sh bench    install what is missing, build, run the benchmarks
#   ./dev.sh package  install what is missing, build the Debian package
#                     (lintian errors fail), install it, try the installed
#                     files
#   ./dev.sh deps     only install what is missing
#   ./dev.sh check-nbdkit TARBALL
#                     build that nbdkit release from its source tarball
#                     into a cached prefix, build this project against
#                     it, run the unit and integration tests that
#                     depend on nbdkit's version, then nbdkit's own
#                     tests with the filter in front
#
# Builds out of tree in ./build (THROTTLE_BUILDDIR to change).
set -euo pipefail

top=$(cd "$(dirname "$0")" && pwd)
builddir=${THROTTLE_BUILDDIR:-$top/build}

# Every Debian package the build, the tests, the guest test and the
# benchmarks use (perl's pod2man, man-db and groff-base render the man
# pages, for the build and for test-man-render.sh).
PACKAGES=(
  build-essential autoconf automake libtool pkg-config perl bc python3
  nbdkit nbdkit-plugin-dev libnbd-dev libnbd-bin python3-libnbd
  python3-prometheus-client
  libev-dev libjson-c-dev check
  fio qemu-utils
  qemu-system-x86 linux-image-amd64 busybox-static nbd-client
  cpio xz-utils zstd kmod strace libcap2-bin
  systemd
  gnuplot-nox valgrind
  debhelper dpkg-dev fakeroot lintian man-db groff-base
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
  local filter=$builddir/plugin/throttle/.libs/nbdkit-throttle-filter.so
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

# The Debian package, built from a copy of the tracked files (so that
# nothing lands in the tree or beside it), checked with lintian, then
# installed on this machine and tried from the installed files only.
package ()
{
  local work=${THROTTLE_PKGDIR:-$(mktemp -d /var/tmp/throttle-pkg.XXXXXX)}
  local version src
  version=$(sed -n '1s/^nbdkit-throttle (\([^)]*\)).*/\1/p' "$top/debian/changelog")
  src=$work/nbdkit-throttle-$version
  rm -rf "$src"
  mkdir -p "$src"
  git -C "$top" ls-files -z | tar -C "$top" --null -T - -cf - | tar -C "$src" -xf -
  echo "== dpkg-buildpackage -us -uc -b in $src"
  (cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 ||
    { tail -n 60 "$work/build.log"; echo "dev.sh: the package did not build (log: $work/build.log)"; exit 1; }
  local changes=$work/nbdkit-throttle_${version}_$(dpkg --print-architecture).changes
  echo "== lintian (errors fail)"
  lintian --fail-on error --info "$changes" || { echo "dev.sh: lintian reported errors"; exit 1; }
  echo "== install"
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "$work"/nbdkit-throttle_"$version"_*.deb \
    "$work"/nbdkit-throttle-dev_"$version"_*.deb >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; exit 1; }
  "$top/debian/tests/installed.sh"
  # Kept when asked for, or when something failed above (set -e).
  [ -n "${THROTTLE_PKGDIR:-}" ] || rm -rf "$work"
}

# nbdkit built from a source tarball, cached by the tarball's sha256:
# PREFIX (what this project builds against) and, beside it, PREFIX.tree,
# nbdkit's build tree, kept for its own tests (tests/nbdkit-suite.sh
# needs its ./nbdkit wrapper and tests/, which hold absolute paths into
# the tree, so the tree is built where it stays).  Each is usable only
# once its .complete exists, written last (the tree's first), so an
# interrupted build is never taken for a good one; a cache from before
# the tree was kept (a prefix alone) gets the tree built beside it.
# Sets nbdkit_prefix and nbdkit_tree.
NBDKIT_CONFIGURE=(
  --disable-static
  --disable-perl --disable-python --disable-ocaml --disable-rust --disable-tcl
  --disable-lua --disable-golang --disable-libguestfs-tests --disable-linuxdisk
  --disable-torrent --disable-vddk --disable-valgrind
  --without-libblkio --without-curl --without-ssh --without-nfs --without-iso
  --without-libvirt --without-bzip2 --without-zlib-ng --without-libguestfs
  --without-ext2 --without-selinux --without-manpages --without-bash-completions
)

nbdkit_from_tarball ()
{
  local tarball=$1 sums sum cache prefix tree start install
  [ -f "$tarball" ] || { echo "dev.sh: $tarball: no such nbdkit tarball" >&2; exit 1; }
  sum=$(sha256sum "$tarball" | cut -d' ' -f1)
  # A SHA256SUMS beside the tarball must vouch for it.
  sums=$(dirname "$tarball")/SHA256SUMS
  if [ -f "$sums" ]; then
    grep -q "^$sum  $(basename "$tarball")\$" "$sums" || {
      echo "dev.sh: $tarball: sha256 $sum does not match $sums:" >&2
      grep -F "$(basename "$tarball")" "$sums" >&2 || echo "(not listed there)" >&2
      exit 1
    }
  fi
  # Tests run nbdkit as other users too (test-guards-rt): as root the
  # prefix must not be under /root, which they cannot enter.
  if [ "$(id -u)" -eq 0 ]; then
    cache=${THROTTLE_NBDKIT_CACHE:-/var/cache/nbdkit-throttle}
  else
    cache=${THROTTLE_NBDKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nbdkit-throttle}
  fi
  prefix=$cache/nbdkit-$sum
  tree=$prefix.tree
  mkdir -p -m 755 "$cache"
  # One build per tarball at a time; the others wait and reuse it.
  exec 9>"$prefix.lock"
  flock 9
  if [ -f "$prefix/.complete" ] && [ -f "$tree/.complete" ]; then
    echo "dev.sh: nbdkit from $(basename "$tarball") (cached in $prefix)" >&2
  else
    start=$(date +%s)
    # A complete prefix stays as it is (other runs may be using it):
    # only the tree is built, the same way, for the same prefix.
    install=
    if [ -f "$prefix/.complete" ]; then
      echo "dev.sh: building nbdkit's tree from $(basename "$tarball") in $tree" >&2
    else
      echo "dev.sh: building nbdkit from $(basename "$tarball") into $prefix" >&2
      rm -rf "$prefix"
      install=yes
    fi
    rm -rf "$tree" "$tree.log"
    mkdir -p "$tree"
    if ! (set -e
          umask 022
          tar -C "$tree" --strip-components=1 -xzf "$tarball"
          cd "$tree"
          autoreconf -i
          ./configure --prefix="$prefix" "${NBDKIT_CONFIGURE[@]}"
          make -j"$(nproc)"
          [ -z "$install" ] || make install
          # Data that nbdkit's "make check" makes first, used by tests
          # of the subset in tests/nbdkit-suite.sh.
          make -C tests file-data) >"$tree.log" 2>&1; then
      tail -n 40 "$tree.log" >&2
      echo "dev.sh: building nbdkit from $tarball failed (log: $tree.log)" >&2
      rm -rf "$tree"
      [ -z "$install" ] || rm -rf "$prefix"
      exit 1
    fi
    rm -f "$tree.log"
    "$prefix/sbin/nbdkit" --version >/dev/null
    "$tree/nbdkit" --version >/dev/null
    echo "$sum $(basename "$tarball")" >"$tree/.complete"
    [ -z "$install" ] || echo "$sum $(basename "$tarball")" >"$prefix/.complete"
    echo "dev.sh: nbdkit built in $(( $(date +%s) - start )) s" >&2
  fi
  exec 9>&-
  nbdkit_prefix=$prefix
  nbdkit_tree=$tree
}

# This project built against PREFIX's nbdkit in a build directory of
# its own, then those of its unit and integration tests that depend on
# nbdkit's version (the swap guest test stays with ./dev.sh check, as
# do the tests of code that nbdkit does not touch), then the subset of
# nbdkit's own tests in
# tests/nbdkit-suite.sh, plain and with the filter in front, in
# nbdkit's build tree.
check_nbdkit ()
{
  local prefix tree version dir start
  nbdkit_from_tarball "$1"
  prefix=$nbdkit_prefix
  tree=$nbdkit_tree
  version=$("$prefix/sbin/nbdkit" --version | awk '{ print $2; exit }')
  dir=${THROTTLE_BUILDDIR:-$top/build}-nbdkit-$version
  cd "$top"
  [ -x configure ] || { autoreconf -fi >"$top/autoreconf.log" 2>&1 ||
                          { cat "$top/autoreconf.log"; exit 1; }; }
  mkdir -p "$dir"
  cd "$dir"
  echo "== nbdkit $version: build in $dir"
  # Configured once, and again if it was for another prefix.
  grep -qx "NBDKIT = $prefix/sbin/nbdkit" Makefile 2>/dev/null ||
    PKG_CONFIG_PATH=$prefix/lib/pkgconfig "$top/configure" -q \
      ${THROTTLE_CONFIGURE_ARGS:-}
  make -j"$(nproc)" >/dev/null
  start=$(date +%s)
  echo "== nbdkit $version: unit and integration tests"
  # Those whose subject depends on nbdkit's version: the others
  # (tests/Makefile.am, NBDKIT_FREE_TESTS: lib/'s unit tests and the
  # simulations, the budget's mutants, tests that start no nbdkit) ran
  # in ./dev.sh check, built and run the same whatever nbdkit is here.
  make -j"$(nproc)" check TESTS='$(NBDKIT_TESTS)'
  # Of the slow tests, the one that depends on nbdkit's version (who
  # may make its threads real-time, through nbdkit_peer_*).  The soak
  # loads the budget, the same code whatever nbdkit runs it: it runs on
  # Debian's nbdkit and in both sanitizer builds, and here it would
  # only lengthen CI, which must stay under 50 minutes.
  make -C tests check-slow SLOW_TESTS=test-guards-rt.sh
  echo "== nbdkit $version: tests passed in $(( $(date +%s) - start )) s"
  start=$(date +%s)
  echo "== nbdkit $version: nbdkit's own tests, plain and with the filter"
  # The tests write their files into the tree's tests/: one run at a
  # time in a tree.
  exec 9>"$prefix.lock"
  flock 9
  make -s -C tests check-nbdkit-suite NBDKIT_SRCDIR="$tree"
  exec 9>&-
  echo "== nbdkit $version: nbdkit's own tests passed in $(( $(date +%s) - start )) s"
}

case "${1:-}" in
  deps) deps ;;
  demo) deps; build; demo ;;
  check)
    deps; build
    cd "$builddir"
    # Two tests at a time on 2 cores, as tests/run-sanitizers.sh runs
    # them; the slow ones one after the other.
    make -j"$(nproc)" check
    make check-slow
    # The short name --filter=throttle works once installed.
    make install >/dev/null
    make installcheck
    # The same unit and integration tests under ASan+UBSan and TSan.
    "$top/tests/run-sanitizers.sh"
    ;;
  bench) deps; build; cd "$builddir"; make bench ;;
  package) deps; package ;;
  check-nbdkit)
    [ $# -eq 2 ] || { echo "usage: ./dev.sh check-nbdkit NBDKIT-TARBALL" >&2; exit 2; }
    deps; check_nbdkit "$(realpath -m "$2")" ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
