#!/usr/bin/env bash
# Run ON the GPU machine (carry: the packed .devrun of scripts/device/pack_devrun.sh; nothing is
# compiled there): the chunk ops of the attention sublayer (Backend::compressor_chunk /
# indexer_chunk / attention_chunk; DS4_CUDA_CHUNK=0 gives the token loop they replace).
#   STAGES="gemv parity bench8 profile8 bench43" bash .devrun/prefill_chunk.sh
# gemv:     cuda_gemv_check --types old (the float GEMM of gemm_float.h takes its 100-row cases)
# parity:   test_cuda_parity (prefill, token by token and chunked evals vs CPU and transformers)
# bench8:   8-layer synthetic Flash q2, 2K prompt, batch 2048: defaults, earlier builds packed
#           as .devrun/bin/ds4-bench-NAME (at 8K too with BENCH8_OTHER_8K=1), BENCH8_ENV (e.g.
#           "DS4_CUDA_MOE_DN2=1") if set, then one switch off each
#           (DS4_CUDA_FGEMM=0: float products on the warp kernels; DS4_CUDA_ATTN_TILED=0: the
#           one-query attention kernels, with 16 and 1 (DS4_CUDA_ATTN_ROWS=1) rows per scores
#           block: with BENCH8_ALL=1), the token loop at batch 512 (DS4_CUDA_CHUNK=0), and 8K
# ncuk:     Nsight Compute sections (speed of light, occupancy, warp stalls, memory) of the first
#           NCU_COUNT launches of the kernels matching KREGEX in that prefill
# ncu8:     Nsight Compute durations of the first NCU_COUNT (default 12) attention kernels of that
#           prefill, tiled and not (which of scores / softmax / weighted rows bounds it)
# profile8: per-op GPU time of that prefill (DS4_CUDA_PROFILE=1): GEMMs vs attention vs the rest
# bench43:  43 layers (86.7 GB in /dev/shm): chunk ops at BENCH_CTX (default "2048 8192"), batch
#           BATCH (default 2048), and the token loop at 2K in the same run (the baseline); with
#           BENCH43_OTHERS=1 also the packed earlier builds (ds4-bench-NAME) at 2K and 8K
# One summary table at the end; logs under $OUT.
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
STAGES=${STAGES:-"gemv parity bench8 ncu8 profile8 bench43"}
BENCH_CTX=${BENCH_CTX:-"2048 8192"}
BATCH=${BATCH:-2048}
GEN=${GEN_TOKENS:-16}
summary=()
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t_all=$(date +%s)
stage() { [[ " $STAGES " == *" $1 "* ]]; }

bench() {  # name file ctx batch env... (BENCH_BIN: another ds4-bench, e.g. the previous build's)
  local name=$1 f=$2 ctx=$3 batch=$4; shift 4
  env "$@" timeout ${BENCH_TIMEOUT:-300} "${BENCH_BIN:-$B/ds4-bench}" -m "$f" --backend cuda --ctx-start "$ctx" --ctx-max "$ctx" \
    --gen-tokens "$GEN" --batch "$batch" --csv "$OUT/$name.csv" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3d %s' "$name" $rc "$(tail -1 "$OUT/$name.csv" 2>/dev/null)")")
}

if stage gemv; then
  t0=$(date +%s)
  timeout 200 "$B/cuda_gemv_check" --types old > "$OUT/gemv_old.log" 2>&1; rc=$?
  grep -E "FAIL" "$OUT/gemv_old.log" | head -10
  summary+=("gemv old rc=$rc ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/gemv_old.log")")
fi

if stage parity; then
  W=/tmp/ds4work; mkdir -p $W
  for f in swa_tiny mixed_small flash_geom; do
    "$B/ds4-gguf" convert-hf --hf tests/fixtures/deepseek4/$f --out $W/$f.f32.gguf --type f32 > /dev/null 2>&1 || echo "convert $f failed"
  done
  "$B/ds4-gguf" synth --preset flash-q2 --layers 3 --out $W/flash3.q2.gguf > /dev/null 2>&1 || echo "synth flash3 failed"
  t0=$(date +%s)
  DS4_CUDA_WORK=$W DS4_FIXTURES=$PWD/tests/fixtures DS4_DEMO=$PWD/models/ds4-demo.gguf \
    timeout 400 "$B/test_cuda_parity" > "$OUT/parity.log" 2>&1; rc=$?
  grep -E "\[cuda-parity\]" "$OUT/parity.log" | awk '{ if ($0 ~ /max\|dlogit\| 0,/ || $0 ~ /identical/) n0++; else print }' | head -40
  summary+=("parity rc=$rc ($(( $(date +%s) - t0 )) s): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity.log" | tr '\n' ' ')")
  summary+=("  worst vs transformers: $(grep 'vs transformers' "$OUT/parity.log" | sed 's/.*max|dlogit| \([^ ]*\).*/\1/' | sort -g | tail -1); CUDA vs CPU lines not 0: $(grep 'CUDA vs CPU' "$OUT/parity.log" | grep -vc 'max|dlogit| 0,')")
fi

if stage bench8 || stage profile8 || stage ncu8 || stage ncuk; then
  F8=/dev/shm/flash8.gguf
  [ -f $F8 ] || "$B/ds4-gguf" synth --preset flash-q2 --layers 8 --out $F8 > "$OUT/synth8.log" 2>&1
fi
if stage bench8; then
  bench chunk8_b2048 $F8 2048 2048
  for other in "$B"/ds4-bench-*; do  # earlier builds (ds4-bench-NAME), same file, same call
    [ -x "$other" ] || continue
    BENCH_BIN=$other bench "${other##*/ds4-bench-}8_b2048" $F8 2048 2048
    [ -n "${BENCH8_OTHER_8K:-}" ] && BENCH_BIN=$other bench "${other##*/ds4-bench-}8_8k_b2048" $F8 8192 2048
  done
  [ -n "${BENCH8_ENV:-}" ] && bench env8_b2048 $F8 2048 2048 $BENCH8_ENV
  bench fgemm0_8_b2048 $F8 2048 2048 DS4_CUDA_FGEMM=0
  if [ -n "${BENCH8_ALL:-}" ]; then
    bench tiled0_8_b2048 $F8 2048 2048 DS4_CUDA_ATTN_TILED=0
    bench tiled0_rows1_8_b2048 $F8 2048 2048 DS4_CUDA_ATTN_TILED=0 DS4_CUDA_ATTN_ROWS=1
  fi
  bench loop8_b512 $F8 2048 512 DS4_CUDA_CHUNK=0
  bench chunk8_8k_b2048 $F8 8192 2048
fi
if stage ncu8; then
  for t in 1 0; do
    DS4_CUDA_ATTN_TILED=$t timeout 200 ncu --clock-control none --kernel-name "regex:k_attn" \
      --launch-count ${NCU_COUNT:-12} --section SpeedOfLight --section LaunchStats "$B/ds4-bench" -m $F8 --backend cuda \
      --ctx-start 2048 --ctx-max 2048 --gen-tokens 1 --batch 2048 > "$OUT/ncu8_tiled$t.txt" 2>&1
    echo "== ncu tiled=$t rc=$?"
    grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Compute \(SM\) Throughput|Memory Throughput" "$OUT/ncu8_tiled$t.txt" \
      | sed -e 's/(ds4::cuda[^)]*)//' | cut -c1-110 | head -60
  done
fi
if stage ncuk; then  # KREGEX: kernels to profile in that prefill (Nsight Compute, first NCU_COUNT launches)
  timeout 300 ncu --clock-control none --kernel-name "regex:${KREGEX:-k_fgemm|k_mma_q8_0|k_moe_mma}" \
    --launch-count ${NCU_COUNT:-12} --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis "$B/ds4-bench" -m $F8 --backend cuda \
    --ctx-start 2048 --ctx-max 2048 --gen-tokens 1 --batch 2048 > "$OUT/ncuk.txt" 2>&1
  echo "== ncu kernels rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued|Stall [A-Z]|L1/TEX Hit|L2 Hit|Block Limit Reg|Block Limit Shared|One or More Eligible" \
    "$OUT/ncuk.txt" | sed -e 's/(ds4::cuda[^)]*)//' | cut -c1-120 | head -${NCU_LINES:-200}
fi
if stage profile8; then
  DS4_CUDA_PROFILE=1 timeout 300 "$B/ds4-bench" -m $F8 --backend cuda --ctx-start 2048 --ctx-max 2048 --gen-tokens 1 \
    --batch "$BATCH" > "$OUT/profile8.log" 2>&1
  grep -A${PROFILE_LINES:-40} -E '^  op ' "$OUT/profile8.log"
  summary+=("profile8 rc=$?: see profile8.log")
fi
if stage bench43; then
  F=/dev/shm/flash-q2.gguf
  t0=$(date +%s)
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  summary+=("synth 43 layers: $(du -h $F | cut -f1) in $(( $(date +%s) - t0 )) s")
  bench loop43_2048_b512 $F 2048 512 DS4_CUDA_CHUNK=0
  for ctx in $BENCH_CTX; do bench chunk43_${ctx}_b$BATCH $F $ctx "$BATCH"; done
  if [ -n "${BENCH43_OTHERS:-}" ]; then  # the earlier builds packed as ds4-bench-NAME, 2K and 8K
    for other in "$B"/ds4-bench-*; do
      [ -x "$other" ] || continue
      for ctx in 2048 8192; do BENCH_BIN=$other bench "${other##*/ds4-bench-}43_${ctx}_b$BATCH" $F $ctx "$BATCH"; done
    done
  fi
fi
echo "==== summary ($(( $(date +%s) - t_all )) s) ===="
echo "csv: context,prefill t/s,generation t/s,kv bytes (ds4-bench)"
printf '%s\n' "${summary[@]}"
