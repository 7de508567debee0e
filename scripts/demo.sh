#!/usr/bin/env bash
# `make demo`: shows what the current build can do, from build/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
if [[ ! -x $bin/ds4-gguf ]]; then
  echo "demo.sh: $bin/ds4-gguf not found; run make first" >&2
  exit 1
fi

echo "== ds4-gguf --version"
"$bin/ds4-gguf" --version
echo
echo "== ds4-gguf inspect tests/fixtures/gguf/tiny.gguf"
"$bin/ds4-gguf" inspect tests/fixtures/gguf/tiny.gguf
