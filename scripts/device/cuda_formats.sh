#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"], built here by `make cuda` and
# scripts/device/pack_devrun.sh build-cuda; nothing is compiled there): the checks
# of the further weight formats on CUDA (issue 22: Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q3_K, Q5_K, Q6_K,
# IQ4_XS, IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S). One call, well under 10 minutes:
#   bash scripts/device/cuda_formats.sh
# Expected: cuda_dequant_check 18 PASS lines; cuda_gemv_check --types new every CASE line PASS and
# "bit-exact"; cuda_backend_check's 15 new "embed <type>" lines exact; test_cuda_parity
# CudaDemo.FurtherFormatsMatchCpu passed (8 recipes, max|dlogit| <= 1e-2, same greedy text).
# Logs under $OUT; a summary table at the end.
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
summary=()
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

run() {  # name, timeout, command...
  local name=$1 t=$2; shift 2
  local t0; t0=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-34s rc=%-3d FAIL lines=%-4s (%d s)' "$name" $rc "$(grep -c FAIL "$OUT/$name.log")" $(( $(date +%s) - t0 )))")
  grep -E "FAIL|error|Failure" "$OUT/$name.log" | head -20
}

run cuda_dequant_check 120 "$B/cuda_dequant_check"
tail -20 "$OUT/cuda_dequant_check.log"
run cuda_gemv_check_new 300 "$B/cuda_gemv_check" --types new
grep -E "^pool|correctness|^TIME|total" "$OUT/cuda_gemv_check_new.log"
run cuda_backend_check 300 "$B/cuda_backend_check"
grep -E "^embed" "$OUT/cuda_backend_check.log"
export DS4_CUDA_WORK=/tmp/ds4work DS4_FIXTURES=$PWD/tests/fixtures DS4_DEMO=$PWD/models/ds4-demo.gguf
mkdir -p "$DS4_CUDA_WORK"
run parity_further_formats 400 "$B/test_cuda_parity" --gtest_filter='CudaDemo.FurtherFormatsMatchCpu'
grep -E "\[cuda-parity\]|OK \]|FAILED|PASSED" "$OUT/parity_further_formats.log" | head -40
# The seven earlier formats, unchanged paths (regression).
run cuda_gemv_check_old 300 "$B/cuda_gemv_check" --types old
grep -E "correctness|total" "$OUT/cuda_gemv_check_old.log"

echo; echo "==== summary"
printf '%s\n' "${summary[@]}"
