#!/usr/bin/env bash
# Sourced by pack_devrun.sh and pack_lean.sh: devrun_libs DIR copies into DIR/lib the shared
# libraries that DIR/bin's programs load beyond libc and CUDA's driver (the GPU image may lack
# them or hold other versions).
devrun_libs() {
  local dir=$1 b
  mkdir -p "$dir/lib"
  for b in "$dir"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
    grep -E 'libfmt|libpcre2|libxxhash|libedit|libbsd|libmd|libgtest|libbenchmark|libcrypto|libssl|liburing|libstdc\+\+|libgcc_s|libicu' |
    while read -r l; do cp -L "$l" "$dir/lib/"; done
}
