#!/usr/bin/env bash
# Issue 14's GPU-machine evidence for routed-expert streaming, in ONE device call (< 540 s by
# default; a deadline guard skips what would not finish). Run ON the GPU machine with the
# prebuilt binaries (carry: [".devrun"]; built here by ninja -C build-cuda ds4-gguf ds4-bench +
# scripts/device/pack_devrun.sh). Needs no network. Modeled on stream_gpu.sh.
#   file   a synthetic Flash q2 file (`ds4-gguf synth --preset flash-q2 --layers N`) on local
#          disk ($OUT_DIR, default /tmp: not /dev/shm, whose tmpfs refuses O_DIRECT), its experts
#          packed beside it with `pack-experts --keep-gguf-experts` (the resident row needs the
#          GGUF's copy). LAYERS: as many as fit the disk with both copies (~3.9 GB per layer),
#          at most 24, unless given; PACK=0 streams from the GGUF's own tensors instead (half the
#          disk, so LAYERS=24 fits). SHM_GGUF=1: the GGUF in /dev/shm (RAM: the dense weights
#          and the resident row's experts) and only the packed experts on the disk, linked
#          beside it as MODEL.gguf.experts, so 24 layers fit the 64 GB disk with the page cache
#          still dropped before every streaming row (tmpfs is not page cache; the experts are
#          read from the packed file on the disk). Reused when present (later calls).
#   bw     the disk's read rate through the engine's I/O path (ds4-gguf stream-bench: O_DIRECT,
#          io_uring, host cache at its floor, no prefetch), page cache dropped; then its best rate
#          (stream-bench --sweep: whole experts in random order, 64 reads in flight), which the
#          bound divides by
#   bench  ds4-bench --backend cuda decode t/s, all with --bench-routing zipf:$SEED (synthetic
#          routing calibrated so LRU holding 28% of the experts hits ~65% of reads; weights stay
#          the router's), page cache dropped before each streaming run, $WARM warm-up tokens
#          then $GEN timed ones: resident; the emulated consumer box (GPU expert budget 16 GB,
#          host 32 GB); host-only budgets of 8/16/32 GB (the gpu tier at its floor, one layer's
#          experts); every streaming row copies the gpu tier's misses into it
#          (--expert-host-compute copy) except the "all, cpu compute" rows beside each budget's
#          "all" row, which compute them on the CPU where they sit (--expert-host-compute cpu); every budget scaled by LAYERS/43, so each cache holds the share of the
#          experts it would hold on the 43-layer model (but the 3 hash-routed layers, which route
#          by the generated token ids, weigh 43/LAYERS times more; the lookahead guesses come from
#          the same source, right with probability 0.5: an assumption). Each budget: the defaults (hot
#          policy + hash + lookahead + protect) against plain LRU without prefetch.
#   ab     at the consumer budget, each policy alone against plain LRU without prefetch.
# EXTRA_FLAGS: appended to every ds4-bench row (e.g. --expert-record-reads). ROUNDS=N: the consumer
# rows N times, alternated. ADMIT_AB=1: each round also runs "all" with DS4_EXPERT_GPU_ADMIT=0;
# PF_AB=1: "all" with DS4_EXPERT_PF_BUDGET=0 (every lookahead guess read).
# Per row: decode t/s, the bound BW / (disk bytes per token), its share, and the same bound for
# the 43-layer model at these hit rates (the per-layer figure scaled), tier hit rates,
# disk and H2D MiB per token, MiB per token computed on the CPU (hcMiB/t), prefetch coverage
# and wasted reads per useful one (evicted unused; "unused": also those still waiting at the end); the ratio to the same budget's plain row. Table on stdout, rows (tab-separated, header first) in
# $OUT/rows.txt, logs in $OUT. STAGES="file test bw bench ab" selects (file is implied by the
# others; test = test_cuda_stream's benchmark-routing check on the demo model and
# cuda_backend_check, when present).
set -uo pipefail
ROOT=${DS4_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DEVRUN=${DS4_DEVRUN:-$ROOT/.devrun}
cd "$ROOT" || exit 1
OUT=${OUT:-/tmp/ds4out}; mkdir -p "$OUT"
OUT_DIR=${OUT_DIR:-/tmp}; mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH=$DEVRUN/lib:${LD_LIBRARY_PATH:-}
B=$DEVRUN/bin
BACKEND=${BACKEND:-cuda}   # cpu: a dry run of the script itself on a machine without a GPU
PACK=${PACK:-1}
CTX=${CTX:-8}          # prompt tokens (one prefill chunk: a long one would read most experts)
WARM=${WARM:-48}       # tokens generated before the clock (the caches start warm)
GEN=${GEN:-32}         # decode tokens timed per run
SEED=${SEED:-1}        # --bench-routing zipf:SEED
DEADLINE=${DEADLINE:-520}   # seconds from the start; nothing starts that would end after it
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
STAGES=${STAGES:-"file test bw bench ab"}
t_all=$(date +%s)
stage() { [[ " $STAGES " == *" $1 "* ]]; }
since() { echo $(( $(date +%s) - $1 )); }
left() { echo $(( DEADLINE - $(since $t_all) )); }
summary=()
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"

DROP_CACHE=${DROP_CACHE:-1}   # 0: leave the page cache alone (a dry run on a shared machine)
drop_cache() {
  [ "$DROP_CACHE" = 1 ] || { echo kept; return; }
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo dropped; else echo kept; fi
}
free_gb() { df -BG --output=avail "$OUT_DIR" | tail -1 | tr -dc 0-9; }
# Flash q2: 86.7 GB over 43 layers (~2.02 GB each, the shared tensors spread over them); the
# packed copy of one layer's experts: 256 x 6.75 MiB = 1.81 GB.
per_layer_mb=$(( PACK == 1 ? 2020 + 1812 : 2020 ))
SHM_GGUF=${SHM_GGUF:-0}
GGUF_DIR=$OUT_DIR
if [ "$SHM_GGUF" = 1 ]; then
  PACK=1; per_layer_mb=1812; GGUF_DIR=/dev/shm
  # /dev/shm is RAM: decode_bar.sh's files (flashNN.gguf, 65-87 GB) left by an earlier call on
  # the same warm machine leave too little for the host cache, and every run is OOM-killed
  # (session 30 lost a call so). They are regenerated on demand: remove them.
  rm -f /dev/shm/flash[0-9]*.gguf
fi

# ---- the file ----
if [ -z "${LAYERS:-}" ]; then
  F=$(ls -1 "$GGUF_DIR"/ds4-evidence-flash*.q2.gguf 2>/dev/null | head -1)
  if [ -n "$F" ]; then
    LAYERS=$(basename "$F" | sed -E 's/ds4-evidence-flash([0-9]+)\.q2\.gguf/\1/')
  else
    fit=$(( ( $(free_gb) - 4 ) * 1000 / per_layer_mb ))
    LAYERS=$(( fit < 24 ? fit : 24 ))
  fi
fi
if [ "$LAYERS" -lt 2 ]; then echo "stream_evidence: $OUT_DIR has $(free_gb) GB free: not even 2 layers fit"; exit 1; fi
F=$GGUF_DIR/ds4-evidence-flash$LAYERS.q2.gguf
t0=$(date +%s)
if [ ! -f "$F" ]; then
  need_gb=$(( LAYERS * per_layer_mb / 1000 + 3 ))
  if [ "$(free_gb)" -lt "$need_gb" ]; then
    echo "stream_evidence: $OUT_DIR has $(free_gb) GB free, $LAYERS layers need ~$need_gb GB: use LAYERS=, PACK=0 or OUT_DIR="
    exit 1
  fi
  "$B/ds4-gguf" synth --preset flash-q2 --layers "$LAYERS" --out "$F" > "$OUT/synth.log" 2>&1 \
    || { echo "synth failed"; tail -5 "$OUT/synth.log"; rm -f "$F"; exit 1; }
fi
summary+=("file: $F, $LAYERS layers, $(du -h --apparent-size "$F" | cut -f1) ($(since $t0) s); disk free after: $(free_gb) GB")
if [ "$PACK" = 1 ] && [ ! -f "$F.experts" ]; then
  t0=$(date +%s)
  packed=$F.experts
  [ "$SHM_GGUF" = 1 ] && packed=$OUT_DIR/$(basename "$F").experts
  "$B/ds4-gguf" pack-experts "$F" --keep-gguf-experts --out "$packed" > "$OUT/pack.log" 2>&1 \
    || { echo "pack-experts failed"; tail -5 "$OUT/pack.log"; rm -f "$packed"; exit 1; }
  [ "$packed" = "$F.experts" ] || ln -sf "$packed" "$F.experts"
  summary+=("pack-experts --keep-gguf-experts: $(du -hL --apparent-size "$F.experts" | cut -f1) at $(readlink -f "$F.experts") ($(since $t0) s)")
fi
src=$([ -f "$F.experts" ] && echo packed || echo "GGUF tensors")
[ "$SHM_GGUF" = 1 ] && src="packed on disk, GGUF in /dev/shm"

# ---- benchmark routing on the device: graph replays read each step's ids ----
if stage test && [ -x "$B/test_cuda_stream" ] && [ "$(left)" -gt 200 ]; then
  t0=$(date +%s)
  DS4_DEMO=$ROOT/models/ds4-demo.gguf timeout 120 "$B/test_cuda_stream" \
    --gtest_filter='CudaStream.BenchRouting*:CudaStream.HostComputeDemo*' \
    > "$OUT/test_cuda_stream.log" 2>&1; rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|^\[cuda-stream\]" "$OUT/test_cuda_stream.log" | head -20
  summary+=("test_cuda_stream BenchRouting* HostComputeDemo* rc=$rc ($(since $t0) s)")
fi
if stage test && [ -x "$B/cuda_backend_check" ] && [ "$(left)" -gt 200 ]; then
  # Every op CPU vs CUDA, among them moe_route with forced ids (exact ids, weights to 1e-6).
  timeout 60 "$B/cuda_backend_check" > "$OUT/cuda_backend_check.log" 2>&1; rc=$?
  grep -E "forced|passed" "$OUT/cuda_backend_check.log"
  summary+=("cuda_backend_check rc=$rc: $(tail -1 "$OUT/cuda_backend_check.log")")
fi

# ---- disk bandwidth through the engine's I/O path ----
BW=${BW:-}   # GB/s; measured here, or given (a later call with STAGES=bench)
if stage bw && [ "$(left)" -gt 100 ]; then
  t0=$(date +%s)
  pc=$(drop_cache)
  timeout 90 "$B/ds4-gguf" stream-bench "$F" --cache $(( LAYERS * 6 )) --prefetch none --policy lru --tokens 40 \
    --warmup 4 > "$OUT/stream_bench.log" 2>&1; rc=$?
  grep -E '^(stream-bench|routing|time|misses)' "$OUT/stream_bench.log"
  FLOOR_BW=$(grep -oE '= [0-9.]+ GB/s' "$OUT/stream_bench.log" | head -1 | grep -oE '[0-9.]+')
  summary+=("disk read (stream-bench, page cache $pc, O_DIRECT, $src, host floor, no prefetch) rc=$rc: ${FLOOR_BW:-?} GB/s ($(since $t0) s)")
  # The bound divides by the best rate the same path reaches: whole experts in random order
  # with every queue slot busy (the floor run above keeps at most one layer's misses in flight).
  pc=$(drop_cache)
  timeout 60 "$B/ds4-gguf" stream-bench "$F" --sweep ${SWEEP_GB:-16} > "$OUT/sweep.log" 2>&1; rc=$?
  grep -E '^stream-bench sweep|^sweep' "$OUT/sweep.log"
  BW=$(grep -oE '= [0-9.]+ GB/s' "$OUT/sweep.log" | head -1 | grep -oE '[0-9.]+')
  summary+=("disk read (stream-bench --sweep ${SWEEP_GB:-16}, page cache $pc, O_DIRECT, random experts, 64 in flight) rc=$rc: ${BW:-?} GB/s: the bound's BW")
  [ -n "$BW" ] || BW=$FLOOR_BW
  # Also beside the file: a later call (a fresh $OUT) with STAGES="bench" or "ab" reads it there.
  echo "$BW" | tee "$OUT/bw.txt" > "$OUT_DIR/ds4-evidence-bw.txt"
fi
[ -z "$BW" ] && [ -f "$OUT_DIR/ds4-evidence-bw.txt" ] && BW=$(cat "$OUT_DIR/ds4-evidence-bw.txt")

# ---- decode per budget ----
# Budgets scaled to LAYERS/43, in MiB (the engine's budget syntax).
mib() { echo $(( $1 * 1024 * LAYERS / 43 )); }
floor_gpu=6                       # one layer's experts for one token: "host only"
ROWS=$OUT/rows.txt
printf 'config\trc\tgen_tps\tbound_tps\tof_bound\tbound43_tps\tvs_plain\tgpu_hit\thost_hit\tdisk_mib_tok\th2d_mib_tok\thost_compute_mib_tok\tstall_ms_tok\tpf_coverage\twasted_per_useful\tunused_per_useful\tpcache\tsecs\trouting\n' > "$ROWS"
table=()
declare -A plain_tps
bench() {  # group (budget name), name, then ds4-bench flags
  local group=$1 name=$2; shift 2
  if [ "$BACKEND" != cuda ]; then  # dry run: no gpu tier on the cpu backend
    local a=() skip=0
    for v in "$@"; do
      if [ $skip = 1 ]; then skip=0; elif [ "$v" = --expert-cache-gpu ]; then skip=1; else a+=("$v"); fi
    done
    set -- "${a[@]}"
  fi
  local log="$OUT/bench_$(echo "$group $name${ROUND:+ r$ROUND}" | tr -c 'a-zA-Z0-9' _).log" csv t0 pc rc to
  csv=${log%.log}.csv
  if [ "$(left)" -lt 40 ]; then
    table+=("$(printf '%-37s skipped: deadline' "$group: $name")")
    printf '%s\tskipped\n' "$group: $name" >> "$ROWS"
    return
  fi
  to=$(( $(left) - 10 )); [ "$to" -gt "$BENCH_TIMEOUT" ] && to=$BENCH_TIMEOUT
  t0=$(date +%s)
  # The resident row reads nothing while it decodes; dropping would only slow its load.
  if [ "$group" = resident ]; then pc=kept; else pc=$(drop_cache); fi
  timeout "$to" "$B/ds4-bench" -m "$F" --backend "$BACKEND" --ctx-start "$CTX" --ctx-max "$CTX" --batch "$CTX" \
    --gen-warmup "$WARM" --gen-tokens "$GEN" --bench-routing "zipf:$SEED" --stats --csv "$csv" "$@" ${EXTRA_FLAGS:-} > "$log" 2>&1
  rc=$?
  local row gen x
  row=$(tail -1 "$csv" 2>/dev/null); gen=$(echo "$row" | cut -d, -f5)
  [ "$rc" -ne 0 ] && gen=
  x=$(grep -m1 'generation experts:' "$log")
  val() { echo "$x" | grep -oE "$1=[0-9.]+" | cut -d= -f2; }
  local disk bound bound43 share vs
  disk=$(val read_mib_per_token)
  bound=$(awk -v bw="${BW:-0}" -v d="${disk:-0}" 'BEGIN { if (bw > 0 && d > 0) printf "%.2f", bw * 1e9 / (d * 1048576) }')
  # Per layer: the same bound for the 43-layer model at these hit rates (disk bytes x 43 / LAYERS).
  bound43=$(awk -v b="${bound:-0}" -v l="$LAYERS" 'BEGIN { if (b > 0) printf "%.2f", b * l / 43 }')
  share=$(awk -v g="${gen:-0}" -v b="${bound:-0}" 'BEGIN { if (g > 0 && b > 0) printf "%.0f%%", 100 * g / b }')
  [ "$name" = plain ] && plain_tps[$group]=${gen:-}
  vs=$(awk -v g="${gen:-0}" -v p="${plain_tps[$group]:-0}" 'BEGIN { if (g > 0 && p > 0) printf "%.2fx", g / p }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tzipf:%s\n' "$group: $name" "$rc" "${gen:--}" \
    "${bound:--}" "${share:--}" "${bound43:--}" "${vs:--}" "$(val gpu_hit)" "$(val host_hit)" "${disk:--}" "$(val h2d_mib_per_token)" \
    "$(val host_compute_mib_per_token)" \
    "$(val stall_ms_per_token)" "$(val prefetch_coverage)" "$(val wasted_per_useful)" "$(val unused_per_useful)" "$pc" "$(since $t0)" "$SEED" >> "$ROWS"
  table+=("$(printf '%-37s %3s %7s %7s %5s %7s %6s %6s %6s %8s %8s %8s %7s %6s %6s %6s %4s' "$group: $name" "$rc" "${gen:--}" \
    "${bound:--}" "${share:--}" "${bound43:--}" "${vs:--}" "$(val gpu_hit)" "$(val host_hit)" "${disk:--}" "$(val h2d_mib_per_token)" \
    "$(val host_compute_mib_per_token)" \
    "$(val stall_ms_per_token)" "$(val prefetch_coverage)" "$(val wasted_per_useful)" "$(val unused_per_useful)" "$(since $t0)")")
  [ "$rc" -ne 0 ] && tail -3 "$log"
  grep -m4 -E '^(routed experts|gpu tier|expert compute|bench routing)' "$log" | sed 's/^/  /'
}
PLAIN="--expert-cache-policy lru --no-prefetch-hash --no-prefetch-lookahead --no-expert-protect"
# The gpu tier's misses: copied into it (every row but the "cpu compute" ones), or computed on
# the CPU where they sit in the host cache; both explicit, so auto's choice changes no row.
COPY="--expert-host-compute copy"
CPU="--expert-host-compute cpu"
consumer="--ssd-streaming --expert-cache-gpu $(mib 16)MiB --expert-cache-host $(mib 32)MiB $COPY"
consumer_cpu="--ssd-streaming --expert-cache-gpu $(mib 16)MiB --expert-cache-host $(mib 32)MiB $CPU"
if stage bench; then
  [ "${SKIP_RESIDENT:-0}" = 1 ] || bench resident resident
  for round in $(seq 1 "${ROUNDS:-1}"); do  # ROUNDS: the consumer rows again, alternated (each vs its round's plain)
    [ "${ROUNDS:-1}" -gt 1 ] && ROUND=$round  # (each round's logs apart)
    # shellcheck disable=SC2086
    bench "gpu16+host32" plain $consumer $PLAIN
    # shellcheck disable=SC2086
    bench "gpu16+host32" all $consumer
    # shellcheck disable=SC2086
    bench "gpu16+host32" "all, cpu compute" $consumer_cpu
    # ADMIT_AB=1: the defaults without the gpu tier's admission (device_tier.h), beside them
    # shellcheck disable=SC2086
    [ "${ADMIT_AB:-0}" = 1 ] && DS4_EXPERT_GPU_ADMIT=0 bench "gpu16+host32" "all, admission off" $consumer
    # PF_AB=1: the defaults with every lookahead guess read (no gap budget): coverage against the
    # demand the guesses delay.
    # shellcheck disable=SC2086
    [ "${PF_AB:-0}" = 1 ] && DS4_EXPERT_PF_BUDGET=0 bench "gpu16+host32" "all, lookahead unbudgeted" $consumer
  done
  ROUND=
  for h in ${HOSTS-8 16 32}; do  # HOSTS: the host-only budgets, GB (HOST_CPU_ROWS=0: no cpu-compute rows)
    # shellcheck disable=SC2086
    bench "host$h" plain --ssd-streaming --expert-cache-gpu $floor_gpu --expert-cache-host "$(mib $h)MiB" $PLAIN $COPY
    # shellcheck disable=SC2086
    bench "host$h" all --ssd-streaming --expert-cache-gpu $floor_gpu --expert-cache-host "$(mib $h)MiB" $COPY
    [ "${HOST_CPU_ROWS:-1}" = 1 ] || continue
    # shellcheck disable=SC2086
    bench "host$h" "all, cpu compute" --ssd-streaming --expert-cache-gpu $floor_gpu --expert-cache-host "$(mib $h)MiB" $CPU
  done
fi
if stage ab; then
  # shellcheck disable=SC2086
  stage bench || bench "gpu16+host32" plain $consumer $PLAIN
  # shellcheck disable=SC2086
  bench "gpu16+host32" "hot only" $consumer --expert-cache-policy hot --no-prefetch-hash --no-prefetch-lookahead --no-expert-protect
  # shellcheck disable=SC2086
  bench "gpu16+host32" "lru+hash" $consumer --expert-cache-policy lru --no-prefetch-lookahead --no-expert-protect
  # shellcheck disable=SC2086
  bench "gpu16+host32" "lru+lookahead+protect" $consumer --expert-cache-policy lru --no-prefetch-hash
fi
if [ ${#table[@]} -gt 0 ]; then
  echo "==== decode, $LAYERS-layer synthetic Flash q2 ($src, O_DIRECT), routing --bench-routing zipf:$SEED, ctx $CTX, $WARM warm-up + $GEN timed tokens, budgets x $LAYERS/43, disk ${BW:-?} GB/s ===="
  printf '%-37s %3s %7s %7s %5s %7s %6s %6s %6s %8s %8s %8s %7s %6s %6s %6s %4s\n' config rc t/s bound ofbnd bound43 vsplain gpuhit \
    hosthit diskMiB/t h2dMiB/t hcMiB/t stallms pfcov waste unused s
  printf '%s\n' "${table[@]}"
fi
echo "==== summary ($(since $t_all) s; rows in $ROWS) ===="
printf '%s\n' "${summary[@]}"
