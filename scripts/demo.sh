#!/usr/bin/env bash
# `make demo`: the build's identity, then the engine generating text with the committed demo
# model (a tiny DeepSeek V4 trained on the King James Bible; see README.md, "Demo model").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
for b in ds4 ds4-gguf; do
  if [[ ! -x $bin/$b ]]; then
    echo "demo.sh: $bin/$b not found; run make first" >&2
    exit 1
  fi
done

echo "== ds4-gguf --version"
"$bin/ds4-gguf" --version
echo
prompt="And God said"
echo "== ds4 -m models/ds4-demo.gguf --raw -p \"$prompt\" -n 64   (the prompt is echoed, then the model's continuation)"
printf '%s' "$prompt"
"$bin/ds4" -m models/ds4-demo.gguf --raw -p "$prompt" -n 64 --seed 1
