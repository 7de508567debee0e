#!/usr/bin/env bash
# Nsight Compute sections (speed of light, occupancy, launch, warp stalls, memory) for chosen
# kernels of replayed decode steps, one device call; the full report goes to $OUT/ncu_kernels.txt.
#   DS4_ROOT=$PWD KERNELS='k_hc_pre_fused|k_wmoe_gate_up' bash .devrun/ncu_kernels.sh
# PREFILL=1: the kernels of the CTX-token prompt's chunks instead (no NVTX filter; BATCH tokens
# per chunk, NCU_SKIP launches of the matched kernels skipped first, so a later layer is seen).
set -u
B=${DS4_ROOT:-$PWD}/.devrun/bin
export LD_LIBRARY_PATH=${DS4_ROOT:-$PWD}/.devrun/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu_out}; mkdir -p "$OUT"
LAYERS=${LAYERS:-8}; CTX=${CTX:-512}
F=/dev/shm/flash$LAYERS.gguf
[ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --layers $LAYERS --out $F > /dev/null 2>&1
if [ "${PREFILL:-0}" = 1 ]; then
  filter=(--launch-skip ${NCU_SKIP:-0}); bench=(--batch ${BATCH:-2048} --gen-tokens 1)
else
  filter=(--nvtx --nvtx-include "ds4_step/"); bench=(--gen-tokens 4)
fi
timeout ${NCU_TIMEOUT:-300} ncu --clock-control none "${filter[@]}" \
  --kernel-name "regex:${KERNELS:-k_hc_pre_fused}" --launch-count ${NCU_COUNT:-6} \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats ${NCU_EXTRA:-} \
  "$B/ds4-bench" -m $F --backend cuda --ctx-start $CTX --ctx-max $CTX "${bench[@]}" > "$OUT/ncu_kernels.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_<].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Compute \(SM\)|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L1/TEX Hit|L2 Hit|Dynamic Shared|Static Shared" "$OUT/ncu_kernels.txt" | cut -c1-150 | head -${NCU_LINES:-150}
