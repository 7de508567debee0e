#!/usr/bin/env bash
# CPU speed, ours against llama.cpp, on the same files and threads, in one run (issue 16).
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench_cpu_vs_llama.sh [OUT_DIR]
#
# For each repetition (REPS, default 3) and each file it runs, back to back:
#   ds4-bench -m FILE -t THREADS --ctx-start P --ctx-max P --gen-tokens G   (random prompt ids)
#   llama-bench -m FILE -t THREADS -p P -n G -r 1 -o csv                     (random prompt ids)
# and records the 1-minute load average before each. The first ds4-bench of every repetition
# also measures a STREAM-like copy and a read-only pass (--mem-copy). Then it prints medians,
# ratios ours / llama.cpp, the weight bytes a decode step reads (from the GGUF: every tensor but
# the embedding table, the routed experts scaled by k / n_expert) and that rate against the
# copy figure (read + write bytes) and the read-only figure (a decode step only reads weights).
#
# Files: models/ds4-demo.gguf (P=512, G=64) and `ds4-gguf synth --preset flash-q2 --layers 4`
# (full Flash width, P=300, G=16), written to DATA_DIR (default /tmp/ds4-bench-data) if absent.
#
# llama-bench: llama.cpp v0.5.0 built CPU-only from the git bundle inside npm
# node-llama-cpp@3.22.1 (llama/gitRelease.bundle), cloned OUTSIDE this repository:
#   git clone <bundle> llama-src && cd llama-src
#   cmake -B build -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
#     -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON \
#     -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
#     -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
#   cmake --build build -j2 --target llama-bench
# (On a CPU with AMX, a GGML_NATIVE build puts Q8_0 weights in ggml's AMX buffer, which does not
# support DeepSeek V4's grouped output projection: llama-bench aborts with
# GGML_ASSERT(*cur_backend_id != -1) at attn_wo_a. Hence AVX-512 without AMX.)
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-bench-cpu-out}
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
DATA_DIR=${DATA_DIR:-/tmp/ds4-bench-data}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary (see the header of this script)}"

for b in "$BUILD/bin/ds4-bench" "$BUILD/bin/ds4-gguf" "$LLAMA_BENCH"; do
  [[ -x $b ]] || { echo "bench_cpu_vs_llama: $b is missing or not executable" >&2; exit 1; }
done
mkdir -p "$OUT" "$DATA_DIR"

FLASH4=$DATA_DIR/flash-q2-4layers.gguf
if [[ ! -f $FLASH4 ]]; then
  echo "bench_cpu_vs_llama: writing $FLASH4" >&2
  "$BUILD/bin/ds4-gguf" synth --preset flash-q2 --layers 4 --out "$FLASH4" >&2
fi

# name|file|prompt tokens|generated tokens
CASES=("demo|models/ds4-demo.gguf|512|64" "flash-q2-4L|$FLASH4|300|16")

RES=$OUT/results.csv
echo "rep,case,engine,load1,prefill_tps,gen_tps" > "$RES"
COPY=$OUT/mem_copy.txt
: > "$COPY"
load1() { cut -d' ' -f1 /proc/loadavg; }

for rep in $(seq 1 "$REPS"); do
  first=1
  for c in "${CASES[@]}"; do
    IFS='|' read -r name file P G <<< "$c"
    # ours
    l=$(load1)
    extra=()
    [[ $first == 1 ]] && extra=(--mem-copy)
    first=0
    "$BUILD/bin/ds4-bench" -m "$file" -t "$THREADS" --ctx-start "$P" --ctx-max "$P" --gen-tokens "$G" \
      "${extra[@]}" > "$OUT/ds4_${name}_$rep.csv" 2> "$OUT/ds4_${name}_$rep.log"
    grep -h "memory copy\|memory read" "$OUT/ds4_${name}_$rep.log" >> "$COPY" || true
    row=$(tail -n 1 "$OUT/ds4_${name}_$rep.csv")
    echo "$rep,$name,ds4,$l,$(echo "$row" | cut -d, -f3),$(echo "$row" | cut -d, -f5)" >> "$RES"
    # llama.cpp
    l=$(load1)
    "$LLAMA_BENCH" -m "$file" -t "$THREADS" -p "$P" -n "$G" -r 1 -o csv \
      > "$OUT/llama_${name}_$rep.csv" 2> "$OUT/llama_${name}_$rep.log"
    python3 - "$OUT/llama_${name}_$rep.csv" "$rep" "$name" "$l" >> "$RES" <<'EOF'
import csv, sys
path, rep, name, load = sys.argv[1:]
pp = tg = ""
for r in csv.DictReader(open(path)):
    if int(r["n_prompt"]) > 0 and int(r["n_gen"]) == 0: pp = r["avg_ts"]
    if int(r["n_gen"]) > 0 and int(r["n_prompt"]) == 0: tg = r["avg_ts"]
print(f"{rep},{name},llama.cpp,{load},{pp},{tg}")
EOF
  done
done

# Weight bytes one decode step reads, from the GGUF's tensor table.
for c in "${CASES[@]}"; do
  IFS='|' read -r name file P G <<< "$c"
  "$BUILD/bin/ds4-gguf" inspect "$file" > "$OUT/inspect_$name.txt"
done

python3 - "$OUT" "${CASES[@]}" <<'EOF'
import csv, re, statistics, sys
out, cases = sys.argv[1], [c.split("|") for c in sys.argv[2:]]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
copies = [float(m.group(1)) for l in open(f"{out}/mem_copy.txt") for m in [re.search(r"copy ([0-9.]+) GB/s", l)] if m]
copy = statistics.median(copies) if copies else float("nan")
reads = [float(m.group(1)) for l in open(f"{out}/mem_copy.txt") for m in [re.search(r"read ([0-9.]+) GB/s", l)] if m]
read = statistics.median(reads) if reads else float("nan")

def decode_bytes(name):
    k = n_exp = None
    total = 0.0
    for line in open(f"{out}/inspect_{name}.txt"):
        m = re.search(r"expert_used_count\s+\S+\s+(\d+)", line)
        if m: k = int(m.group(1))
        m = re.match(r"\s*(\S+)\s+(\S+)\s+\[([0-9, ]+)\]\s+(\d+)\s+(\d+)\s*$", line)
        if not m: continue
        tname, dims, nbytes = m.group(1), [int(d) for d in m.group(3).split(",")], int(m.group(5))
        if tname.startswith("token_embd"): continue           # one row gathered per token
        if tname.endswith("tid2eid.weight"): continue         # hash table: one row per token
        if "_exps." in tname:
            n_exp = dims[-1]
            total += nbytes * (k or 0) / n_exp
        else:
            total += nbytes
    return total

print(f"memory copy (read + write), median of {len(copies)}: {copy:.2f} GB/s; read only, median of {len(reads)}: {read:.2f} GB/s")
print("| case | load avg (1 min) | ds4 prefill t/s | llama.cpp prefill t/s | ratio | ds4 decode t/s | llama.cpp decode t/s | ratio | decode GB/s (ds4) | % of copy | % of read |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name, file, P, G in cases:
    def med(engine, col):
        v = [float(r[col]) for r in rows if r["case"] == name and r["engine"] == engine and r[col]]
        return statistics.median(v) if v else float("nan"), v
    loads = [float(r["load1"]) for r in rows if r["case"] == name]
    dp, dpv = med("ds4", "prefill_tps"); lp, lpv = med("llama.cpp", "prefill_tps")
    dg, dgv = med("ds4", "gen_tps"); lg, lgv = med("llama.cpp", "gen_tps")
    gbps = decode_bytes(name) * dg / 1e9
    print(f"| {name} (P={P}, G={G}) | {min(loads):.1f}-{max(loads):.1f} | {dp:.1f} | {lp:.1f} | {dp/lp:.2f}x | "
          f"{dg:.2f} | {lg:.2f} | {dg/lg:.2f}x | {gbps:.1f} ({decode_bytes(name)/1e6:.0f} MB/token) | {100*gbps/copy:.0f}% | {100*gbps/read:.0f}% |")
    print(f"|   runs | | {', '.join(f'{v:.1f}' for v in dpv)} | {', '.join(f'{v:.1f}' for v in lpv)} | | "
          f"{', '.join(f'{v:.2f}' for v in dgv)} | {', '.join(f'{v:.2f}' for v in lgv)} | | | | |")
EOF
