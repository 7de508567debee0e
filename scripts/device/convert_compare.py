#!/usr/bin/env python3
"""Runs llama.cpp's own convert_hf_to_gguf.py (the carried v0.5.0 source) on the tiny
official-layout checkpoint and compares the routed-expert tensors with our GGUF byte for byte.

Only the vocabulary step is replaced: the tiny checkpoint has no tokenizer (its 256-token vocab
is a placeholder in our converter too), and llama.cpp's BPE vocab step needs a known tokenizer.
The replacement writes a placeholder token list; the vocabulary is not part of the comparison.
Everything else (config reading, FP8 dequantization, the FP4 -> MXFP4 repack, tensor naming)
is llama.cpp's code, unchanged. Called by scripts/device/convert_compare.sh.
"""
import argparse
import contextlib
import hashlib
import os
import re
import sys
import traceback


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def tensor_bytes(t) -> bytes:
    import numpy as np
    b = np.ascontiguousarray(t.data).tobytes()
    if len(b) != int(t.n_bytes):
        raise SystemExit(f"{t.name}: read {len(b)} bytes, header says {t.n_bytes}")
    return b


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", required=True, help="folder with convert_hf_to_gguf.py, conversion/, gguf-py/")
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--out", required=True, help="where llama.cpp's GGUF goes")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()

    llama = os.path.abspath(a.llama)
    sys.path.insert(0, llama)
    sys.path.insert(1, os.path.join(llama, "gguf-py"))
    import numpy
    import torch
    import transformers
    import gguf
    if not os.path.abspath(gguf.__file__).startswith(llama):
        print(f"gguf-py came from {gguf.__file__}, not from {llama}")
        return 2
    commit = open(os.path.join(llama, "COMMIT")).read().strip() if os.path.exists(os.path.join(llama, "COMMIT")) else "?"
    print(f"torch {torch.__version__}, numpy {numpy.__version__}, transformers {transformers.__version__}; "
          f"llama.cpp converter {commit[:12]}")

    import conversion.deepseek as dsk

    def placeholder_vocab(self):
        n = int(self.hparams["vocab_size"])
        self.gguf_writer.add_tokenizer_model("gpt2")
        self.gguf_writer.add_tokenizer_pre("default")
        self.gguf_writer.add_token_list([f"<t{i}>" for i in range(n)])
        self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
        self.gguf_writer.add_token_merges([])

    dsk.DeepseekV4Model.set_vocab = placeholder_vocab
    import convert_hf_to_gguf as conv

    sys.argv = ["convert_hf_to_gguf.py", a.ckpt, "--outfile", a.out]
    with open(a.log, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            conv.main()
            ok = True
        except SystemExit as e:
            ok = e.code in (None, 0)
        except Exception:
            traceback.print_exc()
            ok = False
    if not ok or not os.path.exists(a.out):
        print(f"llama.cpp's convert_hf_to_gguf.py failed (log: {a.log})")
        return 1

    pat = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$")
    ours = gguf.GGUFReader(a.ours)
    theirs = gguf.GGUFReader(a.out)
    mine = {t.name: t for t in ours.tensors if pat.match(t.name)}
    other = {t.name: t for t in theirs.tensors if pat.match(t.name)}
    names = sorted(set(mine) | set(other), key=lambda n: (int(pat.match(n).group(1)), n))
    ckpt_hash = sha(open(os.path.join(a.ckpt, "model.safetensors"), "rb").read())
    print(f"checkpoint model.safetensors sha256 {ckpt_hash}")
    print(f"{'tensor':<28} {'ours':<7} {'llama.cpp':<9} {'shape':<14} {'sha256 (ours)':<18} {'sha256 (llama.cpp)':<18} same")
    all_same = bool(names)
    combined = hashlib.sha256()
    for n in names:
        t, u = mine.get(n), other.get(n)
        bt = tensor_bytes(t) if t is not None else None
        bu = tensor_bytes(u) if u is not None else None
        same = bt is not None and bt == bu and t.tensor_type == u.tensor_type and list(t.shape) == list(u.shape)
        all_same &= same
        if bt is not None:
            combined.update(n.encode() + b"\0" + bt)
        shape = "x".join(str(int(x)) for x in (t.shape if t is not None else u.shape))
        print(f"{n:<28} {t.tensor_type.name if t is not None else '-':<7} {u.tensor_type.name if u is not None else '-':<9} "
              f"{shape:<14} {sha(bt)[:16] if bt is not None else '-':<18} {sha(bu)[:16] if bu is not None else '-':<18} "
              f"{'yes' if same else 'NO'}")
    print(f"routed-expert tensors: {len(names)}, identical: {'all' if all_same else 'NOT all'}; "
          f"combined sha256 (ours) {combined.hexdigest()}")
    others = sorted({t.tensor_type.name for t in theirs.tensors if not pat.match(t.name)})
    print(f"llama.cpp's other tensors: {len(theirs.tensors) - len(other)} ({', '.join(others)}); "
          f"ours: {len(ours.tensors) - len(mine)}")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
