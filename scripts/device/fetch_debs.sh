#!/usr/bin/env bash
# Run HERE (not on the GPU machine): downloads the Debian -dev packages the build needs into
# .debs/ (git-ignored via .git/info/exclude) so a device call can carry them; the GPU image has
# CUDA and CMake but none of these libraries, and no network.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo '/.debs/' >> .git/info/exclude
mkdir -p .debs
cd .debs
apt-get download libfmt-dev libfmt9 nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libxxhash-dev libxxhash0 libedit-dev libedit2 libbsd0 libmd0 libcli11-dev libboost1.81-dev libgtest-dev libgmock-dev >/dev/null
ls -1
