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

# The imatrix per tensor class, with controls (make_table.py's second table). Classes: the
# routed experts' gate/up in IQ2_XXS and in Q2_K, their down in Q4_0, the dense matrices
# (attention, shared expert) in Q4_0; everything else stays the Q8_0 reference. Variants: none
# (ggml's reference rounding; IQ2_XXS: all-ones weights), ones (--uniform-weights: the weighted
# search with all-ones weights), flat (the imatrix with each matrix's importances replaced by
# their mean), shuf (each matrix's importances permuted at random), imx (the imatrix above),
# imxB (a second imatrix: other training-side books, Ruth .. Philippians, 400 chunks of 512
# tokens as llama-imatrix's default context).
awk '/^Ruth 1$/{p=1} /^Colossians 1$/{exit} p' "$work/kjv.txt" >"$work/calibB.txt"
"$bin/ds4" -m "$ref" -t "$T" --imatrix-data "$work/calibB.txt" --imatrix-chunk 512 --imatrix-max-chunks 400 \
  --imatrix-checkpoint 0 --imatrix-out "$work/calibB.imatrix.gguf"
python3 "$here/imatrix_control.py" flat "$work/calib.imatrix.gguf" "$work/flat.imatrix.gguf"
python3 "$here/imatrix_control.py" shuffle "$work/calib.imatrix.gguf" "$work/shuf.imatrix.gguf"
printf '* keep\nblk.*.ffn_gate_exps.weight q2_K\nblk.*.ffn_up_exps.weight q2_K\n' >"$work/gateup-q2k.recipe"
printf '* keep\n' >"$work/dense.recipe"
for t in attn_q_a attn_q_b attn_kv attn_output_a attn_output_b ffn_gate_shexp ffn_up_shexp ffn_down_shexp; do
  printf 'blk.*.%s.weight q4_0\n' $t >>"$work/dense.recipe"
done
for r in gateup gateup-q2k down dense; do
  qv() { "$bin/ds4-gguf" quantize "$ref" "$work/$r-$1.gguf" --recipe "$work/$r.recipe" -t "$T" --quiet "${@:2}"; }
  [ -f "$work/$r.gguf" ] || "$bin/ds4-gguf" quantize "$ref" "$work/$r.gguf" --recipe "$work/$r.recipe" -t "$T" --quiet
  [ -f "$work/$r-imx.gguf" ] || qv imx --imatrix "$work/calib.imatrix.gguf"
  qv ones --uniform-weights
  qv flat --imatrix "$work/flat.imatrix.gguf"
  qv shuf --imatrix "$work/shuf.imatrix.gguf"
  qv imxB --imatrix "$work/calibB.imatrix.gguf"
  for v in "" -imx -ones -flat -shuf -imxB; do
    [ "$r$v" = down -o "$r$v" = down-imx -o "$r$v" = gateup -o "$r$v" = gateup-imx ] || ev "$r$v" "$work/$r$v.gguf"
  done
done
"$bin/ds4-gguf" quantize "$ref" "$work/q2-imxB.gguf" --recipe "$here/demo-q2.recipe" -t "$T" --quiet \
  --imatrix "$work/calibB.imatrix.gguf"
"$bin/ds4-gguf" quantize "$ref" "$work/q2-ones.gguf" --recipe "$here/demo-q2.recipe" -t "$T" --quiet --uniform-weights
ev q2-imxB "$work/q2-imxB.gguf"
ev q2-ones "$work/q2-ones.gguf"

# Pruned experts dropped from the file (quantize --prune): the same logits as the masks above.
for k in 0.75 0.5; do
  "$bin/ds4-gguf" quantize "$ref" "$work/pruned-$k.gguf" --recipe keep --prune "$work/prune-$k.json" --quiet
  ev "pruned-$k" "$work/pruned-$k.gguf"
done
"$bin/ds4-gguf" quantize "$ref" "$work/q2-imx-pruned-0.75.gguf" --recipe "$here/demo-q2.recipe" -t "$T" --quiet \
  --imatrix "$work/calib.imatrix.gguf" --prune "$work/prune-0.75.json"
ev q2-imx-pruned-0.75 "$work/q2-imx-pruned-0.75.gguf"
