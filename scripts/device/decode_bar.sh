#!/usr/bin/env bash
# Issue 12's bar in one device call (H200: the 43-layer synthetic Flash q2 file needs ~87 GB; on an
# 80 GB H100 the same stages run on 34 layers, LAYERS to choose):
#   1. the device copy rate and the one-row GEMV/MoE check (cuda_gemv_check --types $GEMV_TYPES,
#      default flash-moe: the Flash MoE op, checked and timed); BACKEND_CHECK=1: every backend op
#      vs the CPU (cuda_backend_check); FGEMM_CHECK=1: cuda_fgemm_tc_check; MMA_CHECK=1:
#      cuda_mma_check (tensor-core Q8_0 and MoE products, and the one-slot order); the dense bf16
#      matrix rate (bf16_rate.py: cuBLAS through PyTorch; SKIP_BF16=1 skips it);
#   2. decode at 2K on 43 layers, variants alternated (VARIANTS, as ab_decode.sh), REPS times
#      (SKIP_AB=1: no file, no A/B);
#   3. PREFILL_VARIANTS: prefill A/B over PREFILL_CTX tokens (default 8K, batch 2048);
#   then, each while DEADLINE seconds last:
#   4. parity with the defaults (cuda_suite.sh STAGES=parity; SKIP_PARITY=1), and with
#      PARITY_ENV="ENV=VAL,..." the quantized parity cases again with those settings;
#   5. decode at 16K and 64K (CTXS; CTXS="" skips) with the default switches, prefill in chunks
#      of CHUNK tokens (default 4096, the engine's default with resident experts);
#   6. PREFILL_PROFILE="ENV=VAL,..." or "-": per-op times of that prefill (chunks of CHUNK; one
#      stream unless DS4_CUDA_BRANCH=1 is given), and its shares of GEMMs,
#      attention and the rest (each prefill variant's summary line has its FLOP rate: ds4-bench
#      counts the work from the shapes);
#   7. per-op GPU time of one replayed 2K step (DS4_CUDA_PROFILE=graph; SKIP_PROFILE=1).
# Needs .devrun (make cuda; scripts/device/pack_lean.sh build-cuda ..., carried as .devpack and
# unpacked first: docs/TESTING.md). Logs under $OUT.
#   DS4_ROOT=$PWD OUT=$OUT VARIANTS="old:DS4_CUDA_IQ2_NIB=0,DS4_CUDA_FMANY=0 new:" bash scripts/device/decode_bar.sh
set -u
ROOT=${DS4_ROOT:-$PWD}; DR=$ROOT/.devrun; B=$DR/bin
export LD_LIBRARY_PATH=$DR/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/decode_bar}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { [ "$(el)" -lt "${DEADLINE:-540}" ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
# 43 layers (86.7 GB) need an H200; an 80 GB H100 holds 34 (65 GB): same-call ratios only there.
L=${LAYERS:-$([ "$MEM" -gt 120000 ] && echo 43 || echo 34)}
F=/dev/shm/flash$L.gguf
# /dev/shm is RAM: another script's file left on the same warm machine (stream_evidence.sh's
# ds4-evidence-*.gguf, another layer count) would leave too little for this one.
for g in /dev/shm/*.gguf; do [ -e "$g" ] && [ "$g" != "$F" ] && rm -f "$g"; done
[ "${SKIP_AB:-0}" = 1 ] || [ -f $F ] || (nohup bash -c "t=\$(date +%s); $B/ds4-gguf synth --preset flash-q2 --layers $L --out $F > $OUT/synth.log 2>&1; \
  echo synth_s=\$(( \$(date +%s) - t )) >> $OUT/synth.log" > /dev/null 2>&1 &)
summary=()

if [ "${SKIP_GEMV:-0}" != 1 ]; then
  timeout 150 "$B/cuda_gemv_check" --types ${GEMV_TYPES:-flash-moe} > "$OUT/gemv.log" 2>&1; rc=$?
  summary+=("gemv check rc=$rc: $(grep -cE 'FAIL' "$OUT/gemv.log") FAIL lines; $(grep -E 'cases' "$OUT/gemv.log" | tail -1)")
  summary+=("$(grep 'cudaMemcpy D2D' "$OUT/gemv.log" | sed 's/  */ /g')")
fi
# The dense bf16 matrix rate (cuBLAS via PyTorch), which the prefill's TFLOP/s lines are set
# against (issue 13); SKIP_BF16=1 skips it.
if [ "${SKIP_BF16:-0}" != 1 ]; then
  timeout 90 python3 "$DR/bf16_rate.py" > "$OUT/bf16.log" 2>&1
  summary+=("$(tail -1 "$OUT/bf16.log")")
fi
if [ "${BACKEND_CHECK:-0}" = 1 ]; then
  timeout 200 "$B/cuda_backend_check" > "$OUT/backend_check.log" 2>&1; rc=$?
  grep -E "FAIL" "$OUT/backend_check.log" | head -5
  grep -E "^time (${CHECK_TIMES:-hc_post|add \+|moe_route|matmul \+})" "$OUT/backend_check.log"
  summary+=("backend check rc=$rc: $(tail -1 "$OUT/backend_check.log")")
fi
if [ "${FGEMM_CHECK:-0}" = 1 ]; then  # float GEMM v2 vs v1 bit for bit; the tensor-core path vs a double reference
  timeout 150 "$B/cuda_fgemm_tc_check" > "$OUT/fgemm_tc.log" 2>&1; rc=$?
  grep -E "FAIL|^compressor 4096->1024 +2048|^idx q_b.* 2048|^router.* 2048|^hc mix.* 2048" "$OUT/fgemm_tc.log"
  summary+=("fgemm check rc=$rc: $(tail -1 "$OUT/fgemm_tc.log")")
fi
if [ "${MMA_CHECK:-0}" = 1 ]; then  # the tensor-core Q8_0 / MoE products vs the CPU, and the one-slot order
  timeout 240 "$B/cuda_mma_check" > "$OUT/mma_check.log" 2>&1; rc=$?
  grep -E "FAIL|2048 \|" "$OUT/mma_check.log" | cut -c1-200 | head -12
  summary+=("mma check rc=$rc: $(grep -c PASS "$OUT/mma_check.log") PASS, $(grep -c FAIL "$OUT/mma_check.log") FAIL lines")
fi
if [ "${SKIP_AB:-0}" != 1 ]; then
  while pgrep -f 'synth --preset' > /dev/null; do sleep 2; done
  summary+=("synth $L layers: $(du -h $F | cut -f1), $(grep synth_s "$OUT/synth.log" 2>/dev/null)")

  echo "== $L layers, 2K (t=$(el))"
  rm -f /tmp/ab_*.log /tmp/ab_*.csv  # an earlier call's on a warm machine would be read as this one's
  FILE=$F LAYERS=$L CTX=2048 BATCH=2048 GEN_TOKENS=${GEN_TOKENS:-128} REPS=${REPS:-2} VARIANTS="${VARIANTS:-new:}" \
    DS4_ROOT=$ROOT timeout ${AB_TIMEOUT:-300} bash "$DR/ab_decode.sh" | tee "$OUT/ab2k.txt"
  for v in /tmp/ab_*.log; do cp "$v" "$OUT/" 2>/dev/null; done
  # (ds4-bench's weight bandwidth line: the plan's bytes per decode token x t/s, last variant run)
  summary+=("2K: $(grep -h 'decode reads' /tmp/ab_*.log | tail -1)")
fi

# Prefill A/B (PREFILL_VARIANTS, as VARIANTS) over a PREFILL_CTX-token prompt (default 8K), 2K chunks.
if [ -n "${PREFILL_VARIANTS:-}" ] && [ -f $F ]; then
  echo "== prefill ${PREFILL_CTX:-8192} (t=$(el))"
  FILE=$F LAYERS=$L CTX=${PREFILL_CTX:-8192} GEN_TOKENS=4 BATCH=2048 REPS=${PREFILL_REPS:-1} VARIANTS="$PREFILL_VARIANTS" \
    DS4_ROOT=$ROOT timeout 240 bash "$DR/ab_decode.sh" | tee "$OUT/prefill_ab.txt"
  # ds4-bench's FLOP line per variant: the work counted from the shapes over the whole prompt.
  for v in $PREFILL_VARIANTS; do
    summary+=("${v%%:*}: $(grep -h 'TFLOP/s' "/tmp/ab_${v%%:*}.log" 2>/dev/null | tail -1 | sed 's/^ds4-bench: //')")
  done
fi


if left && [ "${SKIP_PARITY:-0}" != 1 ]; then
  echo "== parity (t=$(el))"
  STAGES=parity OUT=$OUT DS4_ROOT=$ROOT DS4_DEVRUN=$DR timeout 200 bash "$DR/cuda_suite.sh" > "$OUT/suite.txt" 2>&1
  summary+=("$(grep -E '^parity:' "$OUT/suite.txt" | tail -1)")
  summary+=("parity lines with max|dlogit| != 0: $(grep 'max|dlogit|' "$OUT/parity.log" | grep -vc 'max|dlogit| 0,')")
fi

# PARITY_ENV="DS4_CUDA_FGEMM_TC=1": the quantized CUDA-vs-CPU cases and the demo's greedy text
# again with those settings (after the parity stage, which made the files they read).
if left && [ -n "${PARITY_ENV:-}" ] && [ "${SKIP_PARITY:-0}" != 1 ]; then
  echo "== parity with $PARITY_ENV (t=$(el))"
  mkdir -p /tmp/ds4work  # (a fresh machine: the parity stage's full-width file made here)
  [ -f /tmp/ds4work/flash3.q2.gguf ] || "$B/ds4-gguf" synth --preset flash-q2 --layers 3 --out /tmp/ds4work/flash3.q2.gguf > /dev/null 2>&1
  ( IFS=','; for e in $PARITY_ENV; do export "$e"; done; unset IFS
    DS4_CUDA_WORK=/tmp/ds4work DS4_FIXTURES=$ROOT/tests/fixtures DS4_DEMO=$ROOT/models/ds4-demo.gguf timeout 200 \
      "$B/test_cuda_parity" --gtest_filter='CudaQuant.*:CudaDemo.GreedyTextIdentical' > "$OUT/parity_env.log" 2>&1 )
  grep -E "\[cuda-parity\]|FAILED" "$OUT/parity_env.log" | head -30
  summary+=("parity with $PARITY_ENV: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity_env.log" | tr '\n' ' ')")
fi

for ctx in ${CTXS-16384 65536}; do  # (the 64K prefill alone takes about a minute on 43 layers)
  left && [ -f $F ] || break
  echo "== ctx $ctx (t=$(el))"
  timeout 150 "$B/ds4-bench" -m $F --backend cuda --ctx-start $ctx --ctx-max $ctx --batch ${CHUNK:-4096} --gen-tokens 64 \
    --csv "$OUT/b$ctx.csv" > "$OUT/b$ctx.log" 2>&1
  summary+=("ctx $ctx: $(tail -1 "$OUT/b$ctx.csv" 2>/dev/null || tail -1 "$OUT/b$ctx.log")")
  summary+=("$(grep -h 'decode reads' "$OUT/b$ctx.log" | tail -1)")
done

# PREFILL_PROFILE="ENV=VAL,...": per-op GPU time (DS4_CUDA_PROFILE=1) of a PREFILL_CTX-token prefill
# with those settings ("-" for the defaults).
if left && [ -f $F ] && [ -n "${PREFILL_PROFILE:-}" ]; then
  echo "== prefill profile $PREFILL_PROFILE (t=$(el))"
  ( IFS=','; for e in $PREFILL_PROFILE; do [ "$e" != - ] && export "$e"; done; unset IFS
    DS4_CUDA_PROFILE=1 timeout 150 "$B/ds4-bench" -m $F --backend cuda --ctx-start ${PREFILL_CTX:-8192} \
      --ctx-max ${PREFILL_CTX:-8192} --gen-tokens 1 --batch ${CHUNK:-4096} > "$OUT/prefill_profile.log" 2>&1 )
  grep -A${PROFILE_LINES:-30} -E '^  op ' "$OUT/prefill_profile.log"
  # Shares of the GPU time: weight products (GEMMs), attention (its rows, scores, indexer,
  # compressor, top-k, rounding), and the rest (hyper-connections, norms, routing glue, copies).
  # hc_pre's mixes are products the FLOP line counts as matrices but sit in "rest" here; the
  # table also holds the one generated token's ops.
  summary+=("prefill time by kind: $(awk '/^  op /{on=1; next} on && !/^  / {on=0} on && NF >= 5 {
      ms = $(NF-2); name = $0; t += ms
      if (name ~ /matmul|moe_experts|moe_router/) g += ms
      else if (name ~ /attention|indexer|compressor|top_k|store_row|attn_qkv|rope|act_round/) a += ms
      else r += ms }
    END { if (t > 0) printf "GEMMs %.0f ms (%.1f%%), attention %.0f ms (%.1f%%), rest %.0f ms (%.1f%%)", g, 100*g/t, a, 100*a/t, r, 100*r/t }' \
    "$OUT/prefill_profile.log")")
fi

if left && [ -f $F ] && [ "${SKIP_PROFILE:-0}" != 1 ]; then
  echo "== profile (t=$(el))"
  DS4_CUDA_PROFILE=graph timeout 120 "$B/ds4-bench" -m $F --backend cuda --ctx-start 2048 --ctx-max 2048 \
    --gen-tokens 16 > "$OUT/profile.log" 2>&1
  grep -E '\[step\]|  op ' "$OUT/profile.log" | head -40
fi

echo "==== summary (t=$(el) s) ===="
{ printf '%s\n' "${summary[@]}"; cat "$OUT/ab2k.txt" "$OUT/prefill_ab.txt" 2>/dev/null; } | tee /tmp/decode_bar_summary.txt
# A device call returns only a few files: the summary, and every log in one archive.
( cd "$OUT" && tar czf /tmp/decode_bar_logs.tgz . && find . -maxdepth 1 -type f -delete &&
  mv /tmp/decode_bar_logs.tgz logs.tgz && cp /tmp/decode_bar_summary.txt summary.txt )
