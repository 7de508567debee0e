#!/usr/bin/env bash
# Run HERE (not on the GPU machine; needs the CPU build tree and npm): fills
# build-convert-compare/ for scripts/device/convert_compare.sh:
#   llama-convert/  llama.cpp v0.5.0's own converter: convert_hf_to_gguf.py, conversion/,
#                   gguf-py/ (+ LICENSE, COMMIT), from the git bundle llama/gitRelease.bundle
#                   of the npm package node-llama-cpp@3.22.1 (`npm pack`, or the bundle given
#                   in DS4_LLAMA_BUNDLE)
#   ckpt/           the tiny official-layout checkpoint (tests/unit/convert/official_checkpoint.h
#                   via ds4_make_official_checkpoint: FP8 + scales, FP4 experts + scales, the
#                   release's tensor names and config.json dialect)
#   ours.gguf       `ds4-gguf convert-hf --type mxfp4-moe` of ckpt/
# About 6 MB in all. Then, device run (one command, under 2 minutes):
#   bash scripts/device/convert_compare.sh        carry: ["build-convert-compare"]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-convert-compare
rm -rf "$out"
mkdir -p "$out/llama-convert"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bundle=${DS4_LLAMA_BUNDLE:-}
if [[ -z $bundle ]]; then
  (cd "$tmp" && npm pack --silent node-llama-cpp@3.22.1 > /dev/null)
  tar -xzf "$tmp/node-llama-cpp-3.22.1.tgz" -C "$tmp" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  grep -q '"tag": "v0.5.0"' "$tmp/package/llama/llama.cpp.info.json" || { echo "node-llama-cpp@3.22.1 does not bundle llama.cpp v0.5.0" >&2; exit 1; }
  bundle=$tmp/package/llama/gitRelease.bundle
fi
git -c advice.detachedHead=false clone -q "$bundle" "$tmp/llama.cpp"
src=$tmp/llama.cpp
for f in convert_hf_to_gguf.py conversion gguf-py LICENSE; do cp -r "$src/$f" "$out/llama-convert/"; done
git -C "$src" rev-parse HEAD > "$out/llama-convert/COMMIT"

cmake --build build -j2 --target ds4_make_official_checkpoint ds4-gguf > /dev/null
gen=$(find build/tests -name ds4_make_official_checkpoint -type f -perm -u+x | head -n 1)
[[ -n $gen ]] || { echo "ds4_make_official_checkpoint was not built (configure build with tests on)" >&2; exit 1; }
"$gen" tests/fixtures/deepseek4/flash_geom "$out/ckpt"
build/bin/ds4-gguf convert-hf --hf "$out/ckpt" --out "$out/ours.gguf" --type mxfp4-moe --quiet
echo "llama.cpp converter from commit $(cat "$out/llama-convert/COMMIT")"
du -sh "$out"
echo "now: device run 'bash scripts/device/convert_compare.sh' with carry [\"$out\"]"
