#!/usr/bin/env bash
# Per-kernel GPU time of replayed decode steps under Nsight Compute (one device call).
# Every kernel node of the graphs launched inside the backend's "ds4_step" NVTX range is timed
# on its own (gpu__time_duration: no launch gaps), so the sum over one step against the step's
# wall time says how much of a step is kernel time and how much is gaps between kernels.
#   DS4_ROOT=$PWD LAYERS=8 CTX=512 bash .devrun/ncu_step.sh
set -u
B=${DS4_ROOT:-$PWD}/.devrun/bin
export LD_LIBRARY_PATH=${DS4_ROOT:-$PWD}/.devrun/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/ncu_out}; mkdir -p "$OUT"
LAYERS=${LAYERS:-8}; CTX=${CTX:-512}; STEPS=${STEPS:-2}
F=/dev/shm/flash$LAYERS.gguf
[ -f $F ] || "$B/ds4-gguf" synth --preset flash-q2 --layers $LAYERS --out $F > "$OUT/synth.log" 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
"$B/ds4-bench" -m $F --backend cuda --ctx-start $CTX --ctx-max $CTX --gen-tokens 32 > "$OUT/plain.log" 2>&1
tail -3 "$OUT/plain.log"
# Kernels of the first replayed steps only (each step has the same nodes; 2 steps bound the time).
timeout ${NCU_TIMEOUT:-400} "$NCU" --clock-control none --nvtx --nvtx-include "ds4_step/" \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  --launch-count ${NCU_KERNELS:-1200} --csv --page raw \
  "$B/ds4-bench" -m $F --backend cuda --ctx-start $CTX --ctx-max $CTX --gen-tokens 6 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$? lines=$(wc -l < "$OUT/ncu.csv")"
tail -5 "$OUT/ncu.err"
python3 - "$OUT/ncu.csv" "$LAYERS" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = None
for i, r in enumerate(rows):
    if 'Kernel Name' in r:
        hdr = r; start = i + 1; break
if hdr is None:
    print("no ncu table"); print("\n".join(",".join(r) for r in rows[:20])); sys.exit(0)
kn = hdr.index('Kernel Name'); tcol = hdr.index('gpu__time_duration.sum')
rcol = hdr.index('dram__bytes_read.sum'); ctx = hdr.index('Context') if 'Context' in hdr else None
data = []
for r in rows[start:]:
    try:
        t = float(r[tcol].replace(',', '')); b = float(r[rcol].replace(',', ''))
    except Exception:
        continue  # the units row
    data.append((r[kn].split('(')[0].split('<')[0], t, b))
unit = rows[start][tcol] if start < len(rows) else ''
print(f"kernels profiled: {len(data)} (time unit {unit})")
agg = collections.OrderedDict()
for n, t, b in data:
    a = agg.setdefault(n, [0, 0.0, 0.0]); a[0] += 1; a[1] += t; a[2] += b
tot = sum(a[1] for a in agg.values())
print(f"{'kernel':40s} {'calls':>6s} {'total':>10s} {'mean':>8s} {'GB/s':>8s}")
for n, a in sorted(agg.items(), key=lambda kv: -kv[1][1])[:40]:
    print(f"{n[:40]:40s} {a[0]:6d} {a[1]:10.1f} {a[1]/a[0]:8.2f} {a[2]/a[1] if a[1] else 0:8.1f}")
print(f"sum of kernel times over {len(data)} kernels: {tot:.1f}")
PY
