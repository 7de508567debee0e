#!/usr/bin/env bash
# Installs what the build and tests need on Debian 12, idempotently:
#   1. Debian packages (apt-get; when not root, prints the command and stops)
#   2. npm dependencies into third_party/*/node_modules, each pinned by its package-lock.json
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev nlohmann-json3-dev libpcre2-dev libboost1.81-dev libcli11-dev libedit-dev libxxhash-dev liburing-dev
  libssl-dev libicu-dev
  clang libclang-rt-14-dev
  tmux python3 python3-jinja2 patch
  chromium chromium-driver
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

# npm: exact versions from the committed lockfiles. Re-run only when a lockfile changes.
#   third_party/npm           oracles and SDK clients (always)
#   third_party/webui         the chat page's bundler and Markdown library, and playwright-core for
#                             its browser test (always; drives the Debian chromium above)
#   third_party/agents/core   Claude Code and pi, run by make test (about 400 MB)
#   third_party/agents/extra  Codex and opencode, only with DS4_SETUP_EXTRA_AGENTS=1 (make test-clients)
npm_install() {
  local dir=$1 how=${2:-ci} stamp=$1/node_modules/.ds4-lock-stamp
  if [[ ! -f $stamp ]] || ! cmp -s "$dir/package-lock.json" "$stamp"; then
    echo "setup.sh: installing npm packages into $dir/node_modules"
    if [[ $how == ci ]]; then
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    else
      # The lock guides the versions, but `npm ci` refuses it: the registry reachable here lists
      # opencode's per-platform optional packages without the non-Linux ones, so the lock can
      # never name them all ("Missing: opencode-darwin-arm64@ from lock file").
      (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error)
    fi
    cp "$dir/package-lock.json" "$stamp"
  fi
}
npm_install third_party/npm
npm_install third_party/webui
npm_install third_party/agents/core
if [[ ${DS4_SETUP_EXTRA_AGENTS:-} == 1 ]]; then
  npm_install third_party/agents/extra install
fi
