#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"], built here by `make cuda` + pack_devrun.sh; nothing
# is compiled there): the tensor-core Q8_0 matmul (issue 13, src/compute/cuda/gemm_mma.cu,
# on by default, DS4_CUDA_MMA=0 turns it off) in one call:
#   1. cuda_mma_check: the kernel vs the CPU backend (bit-exact rule) and its time vs the
#      existing CUDA path, Flash shapes x rows {32, 100, 512, 2048}; then the routed experts
#      (gemm_moe_mma.cu, IQ2_XXS/Q2_K, 64 experts top 6) vs the CPU's moe_experts;
#   2. test_cuda_parity with DS4_CUDA_MMA=1 (the existing parity tests, new path on);
#   3. ds4-bench prefill A/B on the synthetic 43-layer Flash q2 file in /dev/shm: DS4_CUDA_MMA
#      unset, then =1, at the contexts of BENCH_CTX (default "2048 8192").
# STAGES="check parity bench" selects; logs under $OUT. All three may pass 10 minutes: e.g.
#   DS4_ROOT=$PWD STAGES="check parity" bash .devrun/prefill_mma.sh
#   DS4_ROOT=$PWD STAGES=bench BENCH_CTX=2048 bash .devrun/prefill_mma.sh
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
STAGES=${STAGES:-"check parity bench"}
BENCH_CTX=${BENCH_CTX:-"2048 8192"}
summary=()
stage() { [[ " $STAGES " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t_all=$(date +%s)

if stage check; then
  t0=$(date +%s)
  timeout 300 "$B/cuda_mma_check" > "$OUT/cuda_mma_check.log" 2>&1; rc=$?
  head -80 "$OUT/cuda_mma_check.log"
  summary+=("cuda_mma_check rc=$rc FAIL lines=$(grep -c FAIL "$OUT/cuda_mma_check.log") ($(( $(date +%s) - t0 )) s)")
  # One short line per case: name rows | unequal vs CPU | mma ms | old ms | speed-up | verdict.
  while IFS= read -r l; do summary+=("  $l"); done < <(awk -F'|' '/(PASS|FAIL)$/ && NF >= 6 {
      split($2, d, ","); split($4, n, " "); split($5, o, " "); split($6, x, " ");
      nw = split($0, w, " ");
      printf "%-48s | unequal %-6s | mma %9s ms | old %9s ms | x%-6s | %s\n", $1, d[3] + 0, n[1], o[1], x[1], w[nw] }
    /bad expert id|ERROR/ { printf "%s\n", substr($0, 1, 150) }' "$OUT/cuda_mma_check.log")
fi

if stage parity; then
  W=/tmp/ds4work; mkdir -p $W
  for f in swa_tiny mixed_small flash_geom; do
    "$B/ds4-gguf" convert-hf --hf tests/fixtures/deepseek4/$f --out $W/$f.f32.gguf --type f32 > /dev/null 2>&1 || echo "convert $f failed"
  done
  "$B/ds4-gguf" synth --preset flash-q2 --layers 3 --out $W/flash3.q2.gguf > /dev/null 2>&1 || echo "synth flash3 failed"
  DS4_CUDA_MMA=1 DS4_CUDA_WORK=$W DS4_FIXTURES=$PWD/tests/fixtures DS4_DEMO=$PWD/models/ds4-demo.gguf \
    timeout 400 "$B/test_cuda_parity" > "$OUT/parity_mma.log" 2>&1; rc=$?
  grep -E "\[cuda-parity\]|FAILED|PASSED|error" "$OUT/parity_mma.log" | head -40
  summary+=("parity (DS4_CUDA_MMA=1): rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity_mma.log" | tr '\n' ' ')")
fi

if stage bench; then
  F=/dev/shm/flash-q2.gguf
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  for ctx in $BENCH_CTX; do
    for mma in 0 1; do
      DS4_CUDA_MMA=$mma timeout ${BENCH_TIMEOUT:-240} "$B/ds4-bench" -m $F --backend cuda --ctx-start $ctx --ctx-max $ctx \
        --gen-tokens ${GEN_TOKENS:-8} --csv "$OUT/bench_${ctx}_mma$mma.csv" > "$OUT/bench_${ctx}_mma$mma.log" 2>&1
      rc=$?
      tail -5 "$OUT/bench_${ctx}_mma$mma.log"
      summary+=("bench ctx $ctx DS4_CUDA_MMA=$mma rc=$rc: $(tail -1 "$OUT/bench_${ctx}_mma$mma.csv" 2>/dev/null)")
    done
  done
fi

echo "==== summary ($(( $(date +%s) - t_all )) s) ===="
printf '%s\n' "${summary[@]}"
