#!/usr/bin/env bash
# A/B of decode speed on a synthetic Flash q2 file with fewer layers (one device call):
# each VARIANTS entry is "name:ENV=VAL,ENV=VAL" (or "name:" for the default), run one after the
# other on the same file; prints one line per variant (ds4-bench CSV row: decode t/s).
#   DS4_ROOT=$PWD LAYERS=8 CTX=2048 VARIANTS="base: nohc:DS4_CUDA_FUSE_HC=0" bash .devrun/ab_decode.sh
set -u
B=${DS4_ROOT:-$PWD}/.devrun/bin
export LD_LIBRARY_PATH=${DS4_ROOT:-$PWD}/.devrun/lib:${LD_LIBRARY_PATH:-}
LAYERS=${LAYERS:-8}; CTX=${CTX:-2048}; GEN=${GEN_TOKENS:-64}
F=${FILE:-/dev/shm/flash$LAYERS.gguf}
[ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --layers $LAYERS --out $F > /dev/null 2>&1
# BENCH_BIN=NAME among a variant's settings runs .devrun/bin/NAME instead of ds4-bench (an earlier
# build packed beside the current one); REPS=N runs the whole list N times, round robin.
printf '%-12s %s\n' variant "ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kv_bytes"
for rep in $(seq 1 ${REPS:-1}); do
  for v in ${VARIANTS:-base:}; do
    name=${v%%:*}; envs=${v#*:}
    ( IFS=','; for e in $envs; do [ -n "$e" ] && export "$e"; done; unset IFS  # (the options below split on spaces)
      timeout 300 "$B/${BENCH_BIN:-ds4-bench}" -m $F --backend cuda --ctx-start $CTX --ctx-max $CTX --gen-tokens $GEN ${BATCH:+--batch $BATCH} \
        --csv /tmp/ab_$name.csv > /tmp/ab_$name.log 2>&1 )
    printf '%-12s %s\n' "$name" "$(tail -1 /tmp/ab_$name.csv 2>/dev/null || tail -2 /tmp/ab_$name.log)"
  done
done
