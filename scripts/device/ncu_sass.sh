#!/usr/bin/env bash
# Per-instruction (SASS) warp-stall samples of chosen decode kernels, one device call: Nsight
# Compute's SourceCounters for the first NCU_COUNT matching launches inside replayed decode steps,
# exported as CSV ($OUT/sass_K.csv, one file per launch index K) for reading offline.
#   DS4_ROOT=$PWD KERNELS='k_hc_pre_fused' bash .devrun/ncu_sass.sh
set -u
B=${DS4_ROOT:-$PWD}/.devrun/bin
export LD_LIBRARY_PATH=${DS4_ROOT:-$PWD}/.devrun/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu_out}; mkdir -p "$OUT"
LAYERS=${LAYERS:-8}; CTX=${CTX:-2048}
F=/dev/shm/flash$LAYERS.gguf
[ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --layers $LAYERS --out $F > /dev/null 2>&1
timeout ${NCU_TIMEOUT:-240} ncu --clock-control none --nvtx --nvtx-include "ds4_step/" \
  --kernel-name "regex:${KERNELS:-k_hc_pre_fused}" --launch-count ${NCU_COUNT:-1} \
  --section WarpStateStats --section SourceCounters -f -o "$OUT/sass" \
  "$B/ds4-bench" -m $F --backend cuda --ctx-start $CTX --ctx-max $CTX --gen-tokens 4 > "$OUT/sass_run.txt" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/sass.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2> "$OUT/sass_export.err"
echo "export rc=$? lines=$(wc -l < "$OUT/sass.csv")"; head -3 "$OUT/sass_export.err"
rm -f "$OUT/sass.ncu-rep"
