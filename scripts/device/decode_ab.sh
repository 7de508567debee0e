#!/usr/bin/env bash
# One device call for a decode change (twelfth session): the warp-matmul check with the switch
# under test ($SW, e.g. DS4_CUDA_WSPLIT=1); then on a GPU with room for the 43-layer synthetic
# Flash q2 file (H200) the 43-layer A/B at 2K (old defaults OLD, the new defaults, the switch),
# else an 8-layer A/B; then parity with the switch (cuda_suite.sh) and decode at 16K while time
# lasts (DEADLINE seconds after the start, default 330).
#   SW=DS4_CUDA_WSPLIT=1 OLD=DS4_CUDA_IQ2_NIB=0,DS4_CUDA_FMANY=0 bash scripts/device/decode_ab.sh
set -u
DR=${DS4_ROOT:-$PWD}/.devrun; export LD_LIBRARY_PATH=$DR/lib:${LD_LIBRARY_PATH:-}; B=$DR/bin
OUT=${OUT:-/tmp/decode_ab}; mkdir -p $OUT
SW=${SW:-DS4_CUDA_WSPLIT=1}; OLD=${OLD:-DS4_CUDA_IQ2_NIB=0,DS4_CUDA_FMANY=0}; T0=$(date +%s)
left() { [ $(( $(date +%s) - T0 )) -lt ${DEADLINE:-330} ]; }
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
F43=/dev/shm/flash43.gguf
[ "$MEM" -gt 120000 ] && (nohup $B/ds4-gguf synth --preset flash-q2 --out $F43 > /tmp/synth43.log 2>&1 &)
echo "== cuda_gemv_check --types old with $SW"
env $SW timeout 150 $B/cuda_gemv_check --types old > $OUT/gemv.log 2>&1; echo rc=$?; grep -E 'cases|FAIL' $OUT/gemv.log | tail -3
if [ "$MEM" -gt 120000 ]; then
  while pgrep -f 'synth --preset' > /dev/null; do sleep 2; done
  echo "== 43 layers, 2K (t=$(( $(date +%s) - T0 )))"
  FILE=$F43 LAYERS=43 GEN_TOKENS=${GEN_TOKENS:-96} REPS=2 VARIANTS="old:$OLD new: sw:$SW" timeout 240 bash $DR/ab_decode.sh
else
  echo "== 8 layers, 2K"
  LAYERS=8 GEN_TOKENS=64 REPS=2 VARIANTS="new: sw:$SW" timeout 150 bash $DR/ab_decode.sh
fi
if left; then
  env $SW STAGES=parity OUT=$OUT timeout 200 bash $DR/cuda_suite.sh 2>&1 | grep -E 'parity:' | tail -2
  echo "lines with max|dlogit| != 0: $(grep 'max|dlogit|' $OUT/parity.log | grep -vc 'max|dlogit| 0,')"
fi
if [ "$MEM" -gt 120000 ] && left; then
  timeout 100 $B/ds4-bench -m $F43 --backend cuda --ctx-start 16384 --ctx-max 16384 --batch 2048 --gen-tokens 64 \
    --csv $OUT/b16k.csv > $OUT/b16k.log 2>&1; echo "ctx 16384: $(tail -1 $OUT/b16k.csv)"
fi
echo "t=$(( $(date +%s) - T0 ))"
