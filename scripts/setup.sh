#!/usr/bin/env bash
# Installs what the build and tests need on Debian 12, idempotently:
#   1. Debian packages (apt-get; when not root, prints the command and stops)
#   2. npm test dependencies into third_party/npm/node_modules, pinned by package-lock.json
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libcli11-dev libedit-dev libxxhash-dev liburing-dev
  clang libclang-rt-14-dev
  tmux python3
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from Debian or from NodeSource; either provides node + npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]})); then
  cmd="apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: missing Debian packages. Run as root:" >&2
    echo "  apt-get update && $cmd" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  $cmd -qq
fi

# npm: exact versions from the committed lockfile. Re-run only when the lockfile changes.
npm_dir=third_party/npm
stamp=$npm_dir/node_modules/.ds4-lock-stamp
if [[ ! -f $stamp ]] || ! cmp -s "$npm_dir/package-lock.json" "$stamp"; then
  echo "setup.sh: installing npm test dependencies into $npm_dir/node_modules"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$npm_dir/package-lock.json" "$stamp"
fi
