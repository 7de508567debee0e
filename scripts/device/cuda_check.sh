#!/usr/bin/env bash
# Run ON the GPU machine (carry .debs): builds `make cuda`, runs the GPU checks, prints a table.
# From here:  scripts/device/fetch_debs.sh, then device run:
#   bash scripts/device/cuda_check.sh     (carry: [".debs"])
set -uo pipefail
cd "$(dirname "$0")/../.."
eval "$(bash scripts/device/unpack_debs.sh)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
nvcc --version | tail -1
t0=$(date +%s)
make cuda JOBS=$(nproc) > /tmp/cuda_build.log 2>&1
rc=$?
t1=$(date +%s)
tail -20 /tmp/cuda_build.log
[ -n "${OUT:-}" ] && cp /tmp/cuda_build.log "$OUT/cuda_build.log"
echo "make cuda: rc=$rc in $((t1 - t0)) s"
[ $rc -eq 0 ] || exit $rc
./build-cuda/bin/cuda_dequant_check
rc_dequant=$?
./build-cuda/bin/cuda_gemv_check
rc_gemv=$?
echo "cuda_dequant_check rc=$rc_dequant, cuda_gemv_check rc=$rc_gemv"
[ $rc_dequant -eq 0 ] && [ $rc_gemv -eq 0 ]
