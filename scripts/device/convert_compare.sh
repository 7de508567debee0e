#!/usr/bin/env bash
# Run ON the GPU machine (carry: ["build-convert-compare"], made here by
# scripts/device/convert_compare_prepare.sh): runs llama.cpp v0.5.0's own convert_hf_to_gguf.py
# (torch, numpy, transformers from the machine; gguf-py from the carried source) on the tiny
# official-layout checkpoint and compares its routed-expert tensors (MXFP4 repack of the FP4
# experts) with our `convert-hf --type mxfp4-moe` output, byte for byte. Prints a table with
# SHA-256 hashes (the reference hashes get committed after the run, docs/LLAMA_CPP_CROSSCHECK.md)
# and exits 0 only when every routed-expert tensor is identical. Builds nothing.
#   bash scripts/device/convert_compare.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
d=build-convert-compare
for f in "$d/ckpt/model.safetensors" "$d/ours.gguf" "$d/llama-convert/convert_hf_to_gguf.py"; do
  [ -f "$f" ] || { echo "missing $f: run scripts/device/convert_compare_prepare.sh first and carry $d" >&2; exit 2; }
done
log=/tmp/llama_convert.log
t0=$(date +%s)
timeout 300 python3 scripts/device/convert_compare.py --llama "$d/llama-convert" --ckpt "$d/ckpt" \
  --ours "$d/ours.gguf" --out /tmp/llama_mxfp4.gguf --log "$log"
rc=$?
[ -n "${OUT:-}" ] && cp "$log" "$OUT/llama_convert.log" 2>/dev/null
[ $rc -eq 0 ] || tail -30 "$log"
echo "convert_compare: rc=$rc in $(( $(date +%s) - t0 )) s"
exit $rc
