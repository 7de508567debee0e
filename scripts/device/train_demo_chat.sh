#!/usr/bin/env bash
# Run ON the GPU machine: trains the chat demo model (tools/train_demo/train_chat.py) in one call.
#   1. smoke: the whole script on the CPU with tiny data and rows (~1 min); stops here if it fails;
#   2. training + export on the GPU inside --budget seconds (default 235).
# Needs the KJV corpus in the working tree (made HERE by tools/train_demo/extract_corpus.sh;
# carry: [".demo-data"]) and models/ds4-demo/tokenizer.json (committed). Builds nothing.
# Output under $OUT: smoke_log.txt, train_log.txt, hf.tar.part-* (see train_chat.py).
#   bash scripts/device/train_demo_chat.sh [BUDGET_S]
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-235}
out=${OUT:-/tmp/ds4_chat_out}
mkdir -p "$out"
corpus=.demo-data/kjv.txt
[ -f "$corpus" ] || { echo "missing $corpus: run tools/train_demo/extract_corpus.sh here and carry .demo-data" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'

t0=$(date +%s)
CUDA_VISIBLE_DEVICES= timeout 150 python3 tools/train_demo/train_chat.py --corpus "$corpus" --out /tmp/ds4_chat_smoke \
  --smoke --budget 140 > /tmp/ds4_chat_smoke.stdout 2>&1
rc=$?
cp /tmp/ds4_chat_smoke/train_log.txt "$out/smoke_log.txt" 2>/dev/null
echo "smoke: rc=$rc in $(( $(date +%s) - t0 )) s"
if [ $rc -ne 0 ]; then
  tail -40 /tmp/ds4_chat_smoke.stdout
  exit $rc
fi
grep -E "bucket|data ready|held-out|free generation|done at" /tmp/ds4_chat_smoke/train_log.txt | tail -20

t1=$(date +%s)
timeout $((budget + 30)) python3 tools/train_demo/train_chat.py --corpus "$corpus" --out "$out" --budget "$budget" \
  > /tmp/ds4_chat_train.stdout 2>&1
rc=$?
echo "train: rc=$rc in $(( $(date +%s) - t1 )) s"
[ $rc -eq 0 ] || tail -40 /tmp/ds4_chat_train.stdout
grep -vE "^--- |^$" "$out/train_log.txt" | grep -E "bucket|data ready|parameters|eval step|stopped|peak|held-out|free generation|reference|packed|done at|out of memory" | tail -40
ls -la "$out"
exit $rc
