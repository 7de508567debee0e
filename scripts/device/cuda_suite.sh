#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"], built here by `make cuda` + pack_devrun.sh):
#   1. kernel checks (GEMV/MoE, every backend op vs the CPU backend)
#   2. parity (tests/cuda/test_cuda_parity: fixtures vs transformers, CUDA vs CPU, demo text)
#   3. speed: a synthetic 43-layer Flash q2 file in /dev/shm, ds4-bench decode/prefill at the
#      given contexts on CUDA (BENCH_CTX, default "2048"), step graphs on (DS4_CUDA_PROFILE=1: per-op times, no graphs)
#   4. profile: per-op GPU time inside the replayed decode-step graph (PROFILE_CTX, default 2048)
# Prints one short table at the end; logs under $OUT. STAGES="checks parity bench profile" selects.
set -uo pipefail
# DS4_ROOT: the checkout (fixtures, demo model); DS4_DEVRUN: the packed binaries.
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
STAGES=${STAGES:-"checks parity bench"}
BENCH_CTX=${BENCH_CTX:-2048}
summary=()
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
t_all=$(date +%s)

stage() { [[ " $STAGES " == *" $1 "* ]]; }

if stage checks; then
  for c in cuda_dequant_check cuda_gemv_check cuda_backend_check; do
    [ -x "$B/$c" ] || { summary+=("$c: not built"); continue; }
    t0=$(date +%s)
    timeout 300 "$B/$c" > "$OUT/$c.log" 2>&1; rc=$?
    fails=$(grep -c FAIL "$OUT/$c.log")
    summary+=("$(printf '%-22s rc=%d FAIL lines=%s (%d s)' "$c" $rc "$fails" $(( $(date +%s) - t0 )))")
    grep -E "FAIL|error" "$OUT/$c.log" | head -${CHECK_LINES:-10}
  done
fi

if stage parity; then
  W=/tmp/ds4work; mkdir -p $W
  for f in swa_tiny mixed_small flash_geom; do
    "$B/ds4-gguf" convert-hf --hf tests/fixtures/deepseek4/$f --out $W/$f.f32.gguf --type f32 > /dev/null 2>&1 || echo "convert $f failed"
  done
  # Full Flash width, 3 layers (hash-routed, SWA and CSA kinds), for CUDA vs CPU with roundings on.
  "$B/ds4-gguf" synth --preset flash-q2 --layers 3 --out $W/flash3.q2.gguf > /dev/null 2>&1 || echo "synth flash3 failed"
  DS4_CUDA_WORK=$W DS4_FIXTURES=$PWD/tests/fixtures DS4_DEMO=$PWD/models/ds4-demo.gguf \
    timeout 400 "$B/test_cuda_parity" > "$OUT/parity.log" 2>&1; rc=$?
  grep -E "\[cuda-parity\]|FAILED|PASSED|error" "$OUT/parity.log" | head -40
  summary+=("parity: rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity.log" | tr '\n' ' ')")
fi

if stage bench; then
  F=/dev/shm/flash-q2.gguf
  t0=$(date +%s)
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  t1=$(date +%s)
  summary+=("synth flash-q2 43 layers: $(du -h $F | cut -f1) in $((t1 - t0)) s")
  for ctx in $BENCH_CTX; do
    DS4_CUDA_PROFILE=${DS4_CUDA_PROFILE:-0} DS4_CUDA_HOSTSTAT=1 timeout ${BENCH_TIMEOUT:-300} "$B/ds4-bench" -m $F --backend cuda \
      --ctx-start $ctx --ctx-max $ctx --gen-tokens ${GEN_TOKENS:-64} --csv "$OUT/bench_$ctx.csv" > "$OUT/bench_$ctx.log" 2>&1
    rc=$?
    tail -40 "$OUT/bench_$ctx.log"
    summary+=("bench ctx $ctx rc=$rc: $(tail -1 "$OUT/bench_$ctx.csv" 2>/dev/null)")
  done
fi

# Per-op GPU time inside the replayed decode-step graph (DS4_CUDA_PROFILE=graph: an event
# pair per op recorded into the graph; the events themselves add ~3 us per op, so small ops
# read high: compare with the whole-graph row and with the plain run above).
if stage profile; then
  F=/dev/shm/flash-q2.gguf
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  ctx=${PROFILE_CTX:-2048}
  DS4_CUDA_PROFILE=graph timeout ${BENCH_TIMEOUT:-300} "$B/ds4-bench" -m $F --backend cuda --ctx-start $ctx \
    --ctx-max $ctx --gen-tokens 16 > "$OUT/profile_$ctx.log" 2>&1
  grep -E '\[step\]|  op ' "$OUT/profile_$ctx.log" | head -${PROFILE_LINES:-45}
  summary+=("profile ctx $ctx: $(grep 'whole graph' "$OUT/profile_$ctx.log" | awk '{print $(NF-1) " us per step (with event nodes)"}')")
fi

echo "==== summary ($(( $(date +%s) - t_all )) s) ===="
printf '%s\n' "${summary[@]}"
