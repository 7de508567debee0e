#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"] or the packed .devpack, built here by `make cuda` +
# pack_devrun.sh): the decode-speed switches, each checked and timed in one call: the ones still
# off (measured slower) turned on, and the defaults turned off ("no..." variants).
#   1. parity (test_cuda_parity, every test) with all switches on together, and only when that
#      fails, with each switch on alone;
#   2. decode A/B on an 8-layer synthetic Flash q2 file (ab_decode.sh): base, each, all;
#   3. the 43-layer file at 2K with the switches that passed parity and won on 8 layers, against base.
# TOGGLES: space-separated "name:ENV=V[,ENV=V]" (default: the seven below). STAGES selects.
#   DS4_ROOT=$PWD bash .devrun/toggles.sh
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
STAGES=${STAGES:-"parity ab flash"}
TOGGLES=${TOGGLES:-"pdl:DS4_CUDA_PDL=1 q8s:DS4_CUDA_Q8_SPLIT=1 moeg:DS4_CUDA_MOE_SMEM_GRID=1 nohco:DS4_CUDA_HC_OVERLAP=0 noq8w:DS4_CUDA_Q8_WIDE=0 nompair:DS4_CUDA_MOE_PAIR=0 nofq:DS4_CUDA_FUSE_QUANT=0"}
all_envs=$(for t in $TOGGLES; do printf '%s,' "${t#*:}"; done); all_envs=${all_envs%,}
stage() { [[ " $STAGES " == *" $1 "* ]]; }
summary=()
note() { summary+=("$1"); printf '%s\n' "$1" >> "$OUT/summary.txt"; }  # kept as it goes: a killed call still returns it
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
  parity_one() {  # name envs -> rc
    local name=$1 envs=$2 t0 rc worst
    t0=$(date +%s)
    with_envs "$envs" timeout 300 "$B/test_cuda_parity" > "$OUT/parity_$name.log" 2>&1; rc=$?
    worst=$(grep -oE 'max\|dlogit\| [0-9.e+-]+' "$OUT/parity_$name.log" | awk '{print $2}' | sort -g | tail -1)
    note "$(printf 'parity %-6s rc=%d worst max|dlogit| %s (%d s) %s' "$name" $rc "${worst:-?}" $(( $(date +%s) - t0 )) "$(grep -E '^\[  (PASSED|FAILED)' "$OUT/parity_$name.log" | tr '\n' ' ')")"
    grep -E "FAILED|Failure|error" "$OUT/parity_$name.log" | head -6
    return $rc
  }
  # All switches together first: when that passes, each one alone is not run (device time);
  # otherwise each alone, and only those that pass go on.
  if parity_one all "$all_envs"; then
    passed=$all_envs
  else
    for t in $TOGGLES; do
      parity_one "${t%%:*}" "${t#*:}" && passed="$passed,${t#*:}"
    done
  fi
fi
passed=${passed#,}; stage parity || passed=$all_envs  # parity not run here: every switch goes on

if stage ab; then
  vars="base:"
  for t in $TOGGLES; do vars="$vars $t"; done
  vars="$vars all:$all_envs"
  VARIANTS="$vars" LAYERS=${LAYERS:-8} CTX=${CTX:-2048} bash "$DEVRUN/ab_decode.sh" | tee "$OUT/ab.txt"
  note "$(cat "$OUT/ab.txt")"
fi

# The 43-layer run takes the switches that passed parity and, where the 8-layer A/B ran, made
# decode at least 1% faster there alone (each is a separate row of ab.txt: field 5 of the CSV).
best=$passed
if [ -f "$OUT/ab.txt" ]; then
  base_tps=$(awk '$1 == "base" {split($2, f, ","); print f[5]}' "$OUT/ab.txt")
  best=""
  for t in $TOGGLES; do
    name=${t%%:*}; envs=${t#*:}
    [[ ",$passed," == *",$envs,"* ]] || continue
    tps=$(awk -v n="$name" '$1 == n {split($2, f, ","); print f[5]}' "$OUT/ab.txt")
    awk -v a="${tps:-0}" -v b="${base_tps:-0}" 'BEGIN {exit !(b > 0 && a > 1.01 * b)}' && best="$best,$envs"
  done
  best=${best#,}
  note "8-layer winners (>= 1% over base ${base_tps:-?} t/s, parity passed): ${best:-none}"
fi

if stage flash; then
  F=/dev/shm/flash-q2.gguf
  [ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --out $F > "$OUT/synth.log" 2>&1
  note "synth 43 layers: $(tail -1 "$OUT/synth.log" 2>/dev/null)"
  for v in "base:" "best:$best"; do
    [ "$v" = "best:" ] && continue
    name=${v%%:*}; envs=${v#*:}
    with_envs "$envs" timeout 300 "$B/ds4-bench" -m $F --backend cuda --ctx-start 2048 --ctx-max 2048 --gen-tokens 64 \
      --csv "$OUT/flash_$name.csv" > "$OUT/flash_$name.log" 2>&1
    note "flash43 2K $name ($envs): $(tail -1 "$OUT/flash_$name.csv" 2>/dev/null) $(grep -o 'step graphs.*' "$OUT/flash_$name.log" | tail -1)"
  done
fi
echo "==== summary ($(( $(date +%s) - t_all )) s) ===="
printf '%s\n' "${summary[@]}"
