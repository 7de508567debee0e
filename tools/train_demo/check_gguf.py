#!/usr/bin/env python3
"""Checks a converted demo GGUF against what transformers computed on the GPU machine.

  * logits: runs `ds4 --tokens ... --dump-logits` on the reference prompts of train.py
    (ref/tokens.json, ref/logits_<name>.f32 = float32 transformers prefill; an entry with
    "rows" holds only those positions, in that order) and prints, per GGUF and
    --act-quant-sim setting, the largest absolute logit difference (and the median over
    positions of each position's largest difference), the largest difference relative to the
    row's logit range, the mean KL(transformers || engine) of the next-token distributions, and
    how often the argmax agrees;
  * tokenizer: runs `ds4-gguf tokenize --special` on ref/tokenizer_check.json and compares the
    ids with the HF `tokenizers` ids of the trained vocabulary.

No third-party Python packages: float32 files are read with the struct module.
Usage: check_gguf.py --ref REF_DIR --bin BUILD/bin F32.gguf [OTHER.gguf ...]
The first file must be the f32 conversion: with --act-quant-sim off it computes what transformers
computed (same float math, other summation order), so it must agree within --f32-tol (absolute,
on logits of order 10) and on every argmax. Quantized files are only reported: q8_0 rounding
moves logits by ~1e-2, enough to swap near-tied candidates.
Exit status 1 if the f32 file or a tokenizer id disagrees.

With --max-kl K --min-argmax F (the ctest demo_chat_vs_transformers on the committed q8_0 chat
model) no f32 file is needed: every file, act-quant-sim setting and prompt must stay within
mean KL K and agree on the argmax at a fraction >= F of the positions.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile


def read_f32(path, n_vocab):
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 4
    vals = struct.unpack(f"<{n}f", data)
    return [vals[i:i + n_vocab] for i in range(0, n, n_vocab)]


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def log_softmax(row):
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    return [x - lse for x in row]


def compare(ref, got):
    max_rel = kl_sum = 0.0
    agree = 0
    diffs = []
    for r, g in zip(ref, got):
        span = max(r) - min(r)
        d = max(abs(a - b) for a, b in zip(r, g))
        diffs.append(d)
        max_rel = max(max_rel, d / span)
        agree += argmax(r) == argmax(g)
        lr, lg = log_softmax(r), log_softmax(g)
        kl_sum += sum(math.exp(a) * (a - b) for a, b in zip(lr, lg))
    diffs.sort()
    return diffs[-1], diffs[len(diffs) // 2], max_rel, kl_sum / len(ref), agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--f32-tol", type=float, default=1e-3)
    ap.add_argument("--max-kl", type=float, help="bound every file instead of requiring an f32 first file")
    ap.add_argument("--min-argmax", type=float, default=1.0, help="with --max-kl: least argmax agreement")
    ap.add_argument("gguf", nargs="+")
    a = ap.parse_args()
    refs = json.load(open(os.path.join(a.ref, "tokens.json")))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for gguf in a.gguf:
            for sim in ("off", "on"):
                for name, r in refs.items():
                    out = os.path.join(tmp, "logits.f32")
                    cmd = [os.path.join(a.bin, "ds4"), "-m", gguf, "--act-quant-sim", sim,
                           "--tokens", ",".join(map(str, r["tokens"])), "--dump-logits", out]
                    if a.threads:
                        cmd += ["-t", str(a.threads)]
                    subprocess.run(cmd, check=True)
                    ref = read_f32(os.path.join(a.ref, r.get("logits_file", f"logits_{name}.f32")), r["n_vocab"])
                    got = read_f32(out, r["n_vocab"])
                    if "rows" in r:
                        got = [got[i] for i in r["rows"]] if len(got) == len(r["tokens"]) else []
                    if len(got) != len(ref):
                        print(f"{gguf} {name}: {len(got)} rows, expected {len(ref)}")
                        ok = False
                        continue
                    max_abs, median, max_rel, kl, agree = compare(ref, got)
                    print(f"{os.path.basename(gguf):20s} sim {sim:3s} {name:5s} {len(r['tokens']):3d} tokens "
                          f"({len(ref)} rows): max |diff| {max_abs:.2e} (median row {median:.2e}), "
                          f"/range {max_rel:.2e}, KL {kl:.2e}, argmax {agree}/{len(ref)}")
                    if a.max_kl is not None:
                        if kl > a.max_kl or agree < a.min_argmax * len(ref):
                            print(f"  FAIL: bounds are KL <= {a.max_kl}, argmax >= {a.min_argmax:.0%} of the rows")
                            ok = False
                    elif gguf == a.gguf[0] and sim == "off" and (agree != len(ref) or max_abs > a.f32_tol):
                        print(f"  FAIL: the f32 file must match transformers (tolerance {a.f32_tol})")
                        ok = False

        checks = json.load(open(os.path.join(a.ref, "tokenizer_check.json")))
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for c in checks:
                f.write(json.dumps({"text": c["text"]}, ensure_ascii=False) + "\n")
        res = subprocess.run([os.path.join(a.bin, "ds4-gguf"), "tokenize", "-m", a.gguf[0], "--special",
                              "--jsonl", inp], check=True, capture_output=True, text=True)
        got = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
        same = sum(1 for c, g in zip(checks, got) if c["ids"] == g)
        print(f"tokenizer: {same}/{len(checks)} strings tokenized exactly as HF tokenizers")
        if same != len(checks) or len(got) != len(checks):
            ok = False
            for c, g in zip(checks, got):
                if c["ids"] != g:
                    print(f"  differs: {c['text']!r}\n    HF  {c['ids']}\n    C++ {g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
