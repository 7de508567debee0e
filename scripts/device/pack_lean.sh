#!/usr/bin/env bash
# Run HERE after `make cuda`: a device call carries at most 64 MiB including the tracked tree
# (~62 MiB with both demo models), and each CUDA program holds ~20 MB of kernels. This packs
# only the named programs (default: what decode_bar.sh needs), stripped, with the libraries they
# load beyond the GPU image's own, as .devpack/dr.tar.xz (unpacks to .devrun/), and with
# `hold` moves the tracked files no device script reads (the chat demo model, tokenizer and
# qwen35moe fixtures) to /tmp/ds4-held; `restore` brings them back (run it after the call).
#   scripts/device/pack_lean.sh [build-cuda] [PROGRAM ...]; scripts/device/pack_lean.sh hold|restore
set -euo pipefail
cd "$(dirname "$0")/../.."
held=(models/ds4-demo-chat.gguf models/ds4-demo-chat tests/fixtures/tokenizer tests/fixtures/qwen35moe)
if [ "${1:-}" = hold ]; then
  # A local guard (this clone only): a commit while files are held would delete them from git.
  hook=$(git rev-parse --git-path hooks)/pre-commit
  mkdir -p "$(dirname "$hook")"
  [ -e "$hook" ] || { printf '%s\n' '#!/bin/sh' \
    '[ -n "$(find /tmp/ds4-held -type f 2>/dev/null | head -1)" ] && { echo "pre-commit: files are held in /tmp/ds4-held (scripts/device/pack_lean.sh restore first)"; exit 1; }' \
    'exit 0' > "$hook"; chmod +x "$hook"; }
  mkdir -p /tmp/ds4-held
  for p in "${held[@]}"; do [ -e "$p" ] && mkdir -p "/tmp/ds4-held/$(dirname "$p")" && mv "$p" "/tmp/ds4-held/$p"; done
  exit 0
fi
if [ "${1:-}" = restore ]; then
  for p in "${held[@]}"; do [ -e "/tmp/ds4-held/$p" ] && mkdir -p "$(dirname "$p")" && mv "/tmp/ds4-held/$p" "$p"; done
  git status --short | grep '^ D' && { echo "pack_lean: tracked files still missing"; exit 1; }
  exit 0
fi
build=${1:-build-cuda}; shift || true
progs=("$@"); [ ${#progs[@]} -gt 0 ] || progs=(ds4-bench ds4-gguf test_cuda_parity)
for x in .devrun .devpack; do grep -qx "/$x/" .git/info/exclude || echo "/$x/" >> .git/info/exclude; done
rm -rf .devrun .devpack && mkdir -p .devrun/bin .devrun/lib .devpack
for b in "${progs[@]}"; do cp "$build/bin/$b" .devrun/bin/ && strip --strip-all ".devrun/bin/$b"; done
. scripts/device/devrun_libs.sh
devrun_libs .devrun
cp scripts/device/*.sh scripts/device/*.py .devrun/
XZ_OPT=-9 tar cJf .devpack/dr.tar.xz .devrun
ls -la .devpack/dr.tar.xz
