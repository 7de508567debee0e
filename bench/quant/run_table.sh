#!/usr/bin/env bash
# Recomputes the quantization / pruning table of docs/BENCHMARKS.md ("Quantization recipes,
# imatrix and expert pruning on the demo model") on the CPU. Not part of `make test` (~15 min
# on 2 cores).
#
# Data (Debian bible-kjv-text, via tools/train_demo/extract_corpus.sh): the held-out test text is
# the books the demo model never saw (Colossians .. Revelation, tools/train_demo/train.py's
# split); the calibration text for the imatrix and the expert profile is training-side text
# (Genesis .. Judges).
# Reference: models/ds4-demo.gguf (Q8_0), the best file available: the demo's float32 checkpoint
# is not committed. "f32" below is that file dequantized (`--recipe` '* f32'), not the checkpoint.
#
# Usage: bench/quant/run_table.sh [BUILD_BIN_DIR] [WORK_DIR]
set -euo pipefail
bin=${1:-build/bin}
work=${2:-.demo-data/quant}
here=$(cd "$(dirname "$0")" && pwd)
ref=models/ds4-demo.gguf
mkdir -p "$work"
[ -f "$work/kjv.txt" ] || tools/train_demo/extract_corpus.sh "$work/kjv.txt"
awk '/^Colossians 1$/{p=1} p' "$work/kjv.txt" >"$work/heldout.txt"
awk '/^Ruth 1$/{exit} {print}' "$work/kjv.txt" >"$work/calib.txt"
T=${THREADS:-2}

# imatrix + expert profile on the calibration text: 400 chunks of 256 tokens.
"$bin/ds4" -m "$ref" -t "$T" --imatrix-data "$work/calib.txt" --imatrix-chunk 256 --imatrix-max-chunks 400 \
  --imatrix-out "$work/calib.imatrix.gguf" --expert-profile-out "$work/calib.profile.json"

printf '* f32\n' >"$work/f32.recipe"
"$bin/ds4-gguf" quantize "$ref" "$work/f32.gguf" --recipe "$work/f32.recipe" -t "$T" --quiet
"$bin/ds4-gguf" quantize "$ref" "$work/q2.gguf" --recipe "$here/demo-q2.recipe" -t "$T" --quiet
"$bin/ds4-gguf" quantize "$ref" "$work/q2-imx.gguf" --recipe "$here/demo-q2.recipe" -t "$T" --quiet \
  --imatrix "$work/calib.imatrix.gguf"
"$bin/ds4-gguf" quantize "$ref" "$work/q2-boost-imx.gguf" --recipe "$here/demo-q2-boost.recipe" -t "$T" --quiet \
  --imatrix "$work/calib.imatrix.gguf"
for k in 0.75 0.5; do
  "$bin/ds4-gguf" prune --profile "$work/calib.profile.json" --keep-fraction $k --out "$work/prune-$k.json"
  for s in 1 2 3; do
    "$bin/ds4-gguf" prune --profile "$work/calib.profile.json" --keep-fraction $k --random $s \
      --out "$work/prune-$k-random$s.json"
  done
done

ev() {  # name model [mask]
  local name=$1 model=$2 mask=${3:-}
  "$bin/ds4-eval" -m "$model" --kl-base "$ref" --ppl "$work/heldout.txt" --ctx 256 -t "$T" \
    ${mask:+--prune-mask "$mask"} --json "$work/eval-$name.json" | sed "s/^/[$name] /"
}
# Where the imatrix acts: only the routed experts' down projections (Q4_0), or only their
# gate/up (IQ2_XXS), re-quantized without and with it.
printf '* keep\nblk.*.ffn_down_exps.weight q4_0\n' >"$work/down.recipe"
printf '* keep\nblk.*.ffn_gate_exps.weight iq2_xxs\nblk.*.ffn_up_exps.weight iq2_xxs\n' >"$work/gateup.recipe"
for r in down gateup; do
  "$bin/ds4-gguf" quantize "$ref" "$work/$r.gguf" --recipe "$work/$r.recipe" -t "$T" --quiet
  "$bin/ds4-gguf" quantize "$ref" "$work/$r-imx.gguf" --recipe "$work/$r.recipe" -t "$T" --quiet \
    --imatrix "$work/calib.imatrix.gguf"
done

ev q8_0 "$ref"
ev f32 "$work/f32.gguf"
ev q2 "$work/q2.gguf"
ev q2-imx "$work/q2-imx.gguf"
ev q2-boost-imx "$work/q2-boost-imx.gguf"
for k in 0.75 0.5; do
  ev "prune-$k" "$ref" "$work/prune-$k.json"
  for s in 1 2 3; do ev "prune-$k-random$s" "$ref" "$work/prune-$k-random$s.json"; done
done
for r in down down-imx gateup gateup-imx; do ev "$r" "$work/$r.gguf"; done
