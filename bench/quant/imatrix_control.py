#!/usr/bin/env python3
"""Control variants of an imatrix GGUF file for the quantization table (bench/quant/).

  imatrix_control.py shuffle IN OUT [--seed S] [--match REGEX]
      every matrix's column importances permuted at random (same values, wrong columns):
      if quantizing with the real file is no better than with this one, the imatrix carries no
      usable column information for those tensors.
  imatrix_control.py flat IN OUT [--match REGEX]
      every matrix's importances replaced by their mean (= all-ones weights up to scale).

Only tensors whose base name matches REGEX (default: all) are changed; the file layout (header,
offsets, counts) is kept byte for byte, only in_sum2 values move. Pure Python (no numpy).
"""
import argparse
import array
import random
import re
import struct
import sys


def parse_tensors(buf):
    """Returns (data_start, [(name, dims, type, offset)]) of a GGUF v3 file."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(buf[pos:pos + n]).decode()
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        sys.exit(f"unknown GGUF value type {t}")

    if bytes(buf[:4]) != b"GGUF":
        sys.exit("not a GGUF file")
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k = string()
        v = value(take("I"))
        if k == "general.alignment":
            align = v
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        ty, off = take("I"), take("Q")
        tensors.append((name, dims, ty, off))
    return (pos + align - 1) // align * align, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["shuffle", "flat"])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    buf = bytearray(open(a.inp, "rb").read())
    start, tensors = parse_tensors(buf)
    rng = random.Random(a.seed)
    pat = re.compile(a.match)
    changed = 0
    for name, dims, ty, off in tensors:
        if not name.endswith(".in_sum2") or not pat.search(name[:-len(".in_sum2")]):
            continue
        if ty != 0:
            sys.exit(f"{name}: not f32")
        ne0 = dims[0]
        nmat = dims[1] if len(dims) > 1 else 1
        vals = array.array("f")
        vals.frombytes(bytes(buf[start + off:start + off + 4 * ne0 * nmat]))
        for m in range(nmat):
            s = list(vals[m * ne0:(m + 1) * ne0])
            if a.mode == "shuffle":
                rng.shuffle(s)
            else:
                s = [sum(s) / ne0] * ne0
            vals[m * ne0:(m + 1) * ne0] = array.array("f", s)
        buf[start + off:start + off + 4 * ne0 * nmat] = vals.tobytes()
        changed += 1
    open(a.out, "wb").write(buf)
    print(f"{a.mode}: {changed} tensors changed -> {a.out}")


if __name__ == "__main__":
    main()
