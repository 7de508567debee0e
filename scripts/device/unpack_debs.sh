#!/usr/bin/env bash
# Run ON the GPU machine: unpacks carried .debs/ into /tmp/ds4-sysroot and prints the
# environment to use it (eval "$(scripts/device/unpack_debs.sh)").
set -euo pipefail
cd "$(dirname "$0")/../.."
root=/tmp/ds4-sysroot
mkdir -p $root
for f in .debs/*.deb; do dpkg-deb -x "$f" $root; done
# Debian's .pc/.cmake files name /usr; point pkg-config at the sysroot.
for pc in $root/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed -i "s|^prefix=/usr|prefix=$root/usr|" "$pc"
done
cat <<ENV
export DS4_SKIP_SETUP=1
export CMAKE_PREFIX_PATH=$root/usr:$root/usr/lib/x86_64-linux-gnu/cmake
export PKG_CONFIG_PATH=$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig
export CPATH=$root/usr/include
export LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:\${LD_LIBRARY_PATH:-}
ENV
