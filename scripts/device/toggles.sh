#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"] or the packed .devpack, built here by `make cuda` +
# pack_devrun.sh): the decode-speed switches that were written without a GPU, each checked and
# timed in one call before any becomes a default.
#   1. parity (test_cuda_parity, every test) with each switch on alone, then all on together;
#   2. decode A/B on an 8-layer synthetic Flash q2 file (ab_decode.sh): base, each, all;
#   3. the 43-layer file at 2K with all the switches whose parity passed, against base.
# TOGGLES: space-separated "name:ENV=1[,ENV=1]" (default: the five below). STAGES selects.
#   DS4_ROOT=$PWD bash .devrun/toggles.sh
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
STAGES=${STAGES:-"parity ab flash"}
TOGGLES=${TOGGLES:-"pdl:DS4_CUDA_PDL=1 hco:DS4_CUDA_HC_OVERLAP=1 q8w:DS4_CUDA_Q8_WIDE=1 moeg:DS4_CUDA_MOE_SMEM_GRID=1 fq:DS4_CUDA_FUSE_QUANT=1"}
all_envs=$(for t in $TOGGLES; do printf '%s,' "${t#*:}"; done); all_envs=${all_envs%,}
stage() { [[ " $STAGES " == *" $1 "* ]]; }
summary=()
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t_all=$(date +%s)
with_envs() {  # "A=1,B=1" command...
  local envs=$1; shift
  ( IFS=','; for e in $envs; do [ -n "$e" ] && export "$e"; done; "$@" )
}

passed=""
if stage parity; then
  W=/tmp/ds4work; mkdir -p $W
  for f in swa_tiny mixed_small flash_geom; do
    [ -f $W/$f.f32.gguf ] || "$B/ds4-gguf" convert-hf --hf tests/fixtures/deepseek4/$f --out $W/$f.f32.gguf --type f32 > /dev/null 2>&1
  done
  [ -f $W/flash3.q2.gguf ] || "$B/ds4-gguf" synth --preset flash-q2 --layers 3 --out $W/flash3.q2.gguf > /dev/null 2>&1
  export DS4_CUDA_WORK=$W DS4_FIXTURES=$PWD/tests/fixtures DS4_DEMO=$PWD/models/ds4-demo.gguf
  for t in $TOGGLES "all:$all_envs"; do
    name=${t%%:*}; envs=${t#*:}
    t0=$(date +%s)
    with_envs "$envs" timeout 300 "$B/test_cuda_parity" > "$OUT/parity_$name.log" 2>&1; rc=$?
    worst=$(grep -oE 'max\|dlogit\| [0-9.e+-]+' "$OUT/parity_$name.log" | awk '{print $2}' | sort -g | tail -1)
    summary+=("$(printf 'parity %-6s rc=%d worst max|dlogit| %s (%d s) %s' "$name" $rc "${worst:-?}" $(( $(date +%s) - t0 )) "$(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity_$name.log" | tr '\n' ' ')")")
    [ $rc -eq 0 ] && [ "$name" != all ] && passed="$passed,$envs"
    grep -E "FAILED|Failure|error" "$OUT/parity_$name.log" | head -6
  done
fi
passed=${passed#,}; [ -n "$passed" ] || passed=$all_envs

if stage ab; then
  vars="base:"
  for t in $TOGGLES; do vars="$vars $t"; done
  vars="$vars all:$all_envs"
  VARIANTS="$vars" LAYERS=${LAYERS:-8} CTX=${CTX:-2048} bash "$DEVRUN/ab_decode.sh" | tee "$OUT/ab.txt"
  summary+=("$(cat "$OUT/ab.txt")")
fi

if stage flash; then
  F=/dev/shm/flash-q2.gguf
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  for v in "base:" "passed:$passed"; do
    name=${v%%:*}; envs=${v#*:}
    with_envs "$envs" timeout 300 "$B/ds4-bench" -m $F --backend cuda --ctx-start 2048 --ctx-max 2048 --gen-tokens 64 \
      --csv "$OUT/flash_$name.csv" > "$OUT/flash_$name.log" 2>&1
    summary+=("flash43 2K $name ($envs): $(tail -1 "$OUT/flash_$name.csv" 2>/dev/null)")
  done
fi
echo "==== summary ($(( $(date +%s) - t_all )) s) ===="
printf '%s\n' "${summary[@]}"
