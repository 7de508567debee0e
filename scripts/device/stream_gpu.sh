#!/usr/bin/env bash
# Run ON the GPU machine (carry: [".devrun"], built here by `make cuda` (or ninja -C build-cuda
# ds4 ds4-gguf ds4-bench test_cuda_stream) + scripts/device/pack_devrun.sh). Needs no network.
#   1. a synthetic Flash q2 file of LAYERS layers (default 8, ~2 GB per layer) on local disk
#      ($OUT_DIR, default /tmp: not /dev/shm, whose tmpfs refuses O_DIRECT), reused when present;
#      its experts packed next to it (PACK=1, the default; the GGUF keeps its copy, so the
#      resident run still works); skipped when the disk lacks room
#   2. test_cuda_stream: streaming through the gpu tier is bit-identical to resident (demo model
#      and that file), with budgets that force misses in both tiers
#   3. the disk's read rate through the engine's own I/O path (ds4-gguf stream-bench, tiny cache,
#      no prefetch): the bound BW / (miss bytes per token)
#   4. ds4-bench --backend cuda, resident and streaming at a few budgets (GPU 2 GB + host 4 GB,
#      the gpu tier at its floor + host 4 GB, GPU 2 GB + the host floor); a table of decode t/s,
#      tier hit rates and MiB per token read from disk and copied to the GPU.
# Routing: the synthetic file's own (random) router, close to uniform: hit rates are about the
# cached fraction, not what trained routing gives. Page cache: dropped before each run when
# this user may (printed); O_DIRECT when the file system allows it (printed per run).
# Logs under $OUT (default /tmp/ds4out). STAGES="test bw bench" selects.
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT"
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
OUT_DIR=${OUT_DIR:-/tmp}; mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
LAYERS=${LAYERS:-8}
CTX=${CTX:-32}       # prompt tokens per bench run (one prefill chunk)
GEN=${GEN:-32}       # decode tokens timed per bench run
STAGES=${STAGES:-"test bw bench"}
F=$OUT_DIR/ds4-stream-flash$LAYERS.q2.gguf
summary=()
t_all=$(date +%s)
stage() { [[ " $STAGES " == *" $1 "* ]]; }
since() { echo $(( $(date +%s) - $1 )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

drop_cache() {
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo dropped; else echo kept; fi
}

# ---- 1. the file ----
t0=$(date +%s)
if [ ! -f "$F" ]; then
  free_gb=$(df -BG --output=avail "$OUT_DIR" | tail -1 | tr -dc 0-9)
  need_gb=$(( LAYERS * 2 + 3 ))
  if [ "$free_gb" -lt "$need_gb" ]; then
    echo "stream_gpu: $OUT_DIR has ${free_gb} GB free, the $LAYERS-layer file needs ~${need_gb} GB: use LAYERS= or OUT_DIR="
    exit 1
  fi
  "$B/ds4-gguf" synth --preset flash-q2 --layers "$LAYERS" --out "$F" > "$OUT/synth.log" 2>&1 || { echo "synth failed"; tail -5 "$OUT/synth.log"; exit 1; }
fi
summary+=("file: $F $(du -h --apparent-size "$F" | cut -f1) ($(since $t0) s)")
if [ "${PACK:-1}" = 1 ] && [ ! -f "$F.experts" ]; then
  t0=$(date +%s)
  free_gb=$(df -BG --output=avail "$OUT_DIR" | tail -1 | tr -dc 0-9)
  if [ "$free_gb" -gt $(( LAYERS * 2 + 2 )) ]; then
    "$B/ds4-gguf" pack-experts "$F" --keep-gguf-experts > "$OUT/pack.log" 2>&1 || { echo "pack-experts failed"; tail -5 "$OUT/pack.log"; rm -f "$F.experts"; }
    summary+=("pack-experts --keep-gguf-experts: $(du -h --apparent-size "$F.experts" 2>/dev/null | cut -f1) ($(since $t0) s)")
  else
    summary+=("pack-experts skipped: ${free_gb} GB free (experts stream from the GGUF)")
  fi
fi

# ---- 2. bit-identity ----
if stage test; then
  t0=$(date +%s)
  DS4_DEMO=$ROOT/models/ds4-demo.gguf DS4_STREAM_FLASH=$F timeout ${TEST_TIMEOUT:-240} "$B/test_cuda_stream" \
    > "$OUT/test_cuda_stream.log" 2>&1; rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|error|gpu tier:|^\[cuda-stream\]" "$OUT/test_cuda_stream.log" | head -40
  summary+=("test_cuda_stream rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]' "$OUT/test_cuda_stream.log" | tr '\n' ' ') ($(since $t0) s)")
fi

# ---- 3. the disk through the engine's I/O path ----
if stage bw; then
  t0=$(date +%s)
  pc=$(drop_cache)
  timeout 90 "$B/ds4-gguf" stream-bench "$F" --cache $(( LAYERS * 6 )) --prefetch none --tokens 48 --warmup 4 \
    > "$OUT/stream_bench.log" 2>&1; rc=$?
  tail -8 "$OUT/stream_bench.log"
  summary+=("stream-bench (page cache $pc, host floor, no prefetch, its synthetic zipf routing) rc=$rc: $(grep -iE 'GB/s|MB/s' "$OUT/stream_bench.log" | head -2 | tr '\n' ' ') ($(since $t0) s)")
fi

# ---- 4. decode speed per budget ----
rows=()
bench() {  # name, then ds4-bench flags
  local name=$1; shift
  local log="$OUT/bench_$(echo "$name" | tr -c 'a-zA-Z0-9' _).log" csv t0 pc rc
  csv=${log%.log}.csv
  t0=$(date +%s)
  pc=$(drop_cache)
  timeout ${BENCH_TIMEOUT:-150} "$B/ds4-bench" -m "$F" --backend cuda --ctx-start "$CTX" --ctx-max "$CTX" \
    --gen-tokens "$GEN" --batch "$CTX" --stats --csv "$csv" "$@" > "$log" 2>&1; rc=$?
  local row prefill gen x
  row=$(tail -1 "$csv" 2>/dev/null)
  prefill=$(echo "$row" | cut -d, -f3); gen=$(echo "$row" | cut -d, -f5)
  x=$(grep -m1 'generation experts:' "$log")
  val() { echo "$x" | grep -oE "$1=[0-9.]+" | cut -d= -f2; }
  local direct=buffered
  grep -q 'O_DIRECT' "$log" && direct=O_DIRECT
  grep -q 'routed experts' "$log" || direct=-
  rows+=("$(printf '%-26s %4s %8s %8s %7s %7s %9s %9s %8s %-9s %-7s %4s' "$name" "$rc" "${gen:--}" "${prefill:--}" \
    "$(val gpu_hit)" "$(val host_hit)" "$(val read_mib_per_token)" "$(val h2d_mib_per_token)" "$(val stall_ms_per_token)" \
    "$direct" "$pc" "$(since $t0)")")
  [ $rc -ne 0 ] && tail -5 "$log"
  grep -E '^(residency|routed experts|gpu tier) ' "$log" | sed 's/^/  /'
}
if stage bench; then
  floor_host=$(( LAYERS * 6 ))
  bench "resident"
  bench "gpu 2GB + host 4GB" --ssd-streaming --expert-cache-gpu 2GB --expert-cache-host 4GB
  bench "gpu floor + host 4GB" --ssd-streaming --expert-cache-gpu 6 --expert-cache-host 4GB
  bench "gpu 2GB + host floor" --ssd-streaming --expert-cache-gpu 2GB --expert-cache-host $floor_host
  [ -n "${EXTRA_BENCH:-}" ] && bench "extra: $EXTRA_BENCH" $EXTRA_BENCH
  echo "==== decode (ctx $CTX, $GEN tokens, $LAYERS layers; routing: the synthetic file's own router, near-uniform) ===="
  printf '%-26s %4s %8s %8s %7s %7s %9s %9s %8s %-9s %-7s %4s\n' config rc gen_t/s pre_t/s gpu_hit host_hit \
    disk_MiB/t h2d_MiB/t stall_ms io pcache s
  printf '%s\n' "${rows[@]}"
fi

echo "==== summary ($(since $t_all) s) ===="
printf '%s\n' "${summary[@]}"
