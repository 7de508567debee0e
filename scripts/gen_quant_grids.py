#!/usr/bin/env python3
"""Writes src/quant/iq_grids.cpp: the constant lattices of the IQ1_S/IQ1_M, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S codebooks and the 16-entry value tables of IQ4_NL/IQ4_XS and MXFP4.

These tables are part of the GGUF file formats. They are not exported by libggml-base.so, so
this script reads them back through ggml's own decoders (llama.cpp v0.5.0's libggml-base.so
from npm @node-llama-cpp/linux-x64, installed by scripts/setup.sh): it builds blocks whose
scales make every decoded value an exact multiple of one grid entry, decodes them with
ggml's dequantize_row_*, and divides the scale back out (every step is exact in float).

Usage: python3 scripts/gen_quant_grids.py > src/quant/iq_grids.cpp
"""
import ctypes
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "third_party/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so")
ggml = ctypes.CDLL(LIB)
ONE = 0x3C00  # f16 1.0


def decode(fn, blocks, n):
    out = (ctypes.c_float * n)()
    buf = ctypes.create_string_buffer(bytes(blocks), len(blocks))
    getattr(ggml, fn)(buf, out, ctypes.c_int64(n))
    return list(out)


def exact(v, scale):
    q = v / scale
    if q != int(q):
        raise SystemExit(f"decoded value {v} is not a whole multiple of {scale}")
    return int(q)


def grid_u8(fn, nentries, entry_elems, block_for, scale):
    """block_for(first) -> (bytes of one block, list of entry indices in output order)."""
    table = [None] * nentries
    first = 0
    while first < nentries:
        blk, order = block_for(first)
        vals = decode(fn, blk, 256)
        per = entry_elems
        for k, idx in enumerate(order):
            if idx < nentries:
                table[idx] = [exact(v, scale) for v in vals[k * per:(k + 1) * per]]
        first += len(order)
    return table


def iq2xs_block(first):  # {f16 d; u16 qs[32]; u8 scales[8]}; db = d*(0.5+0)*0.25
    idx = [min(first + k, 511) for k in range(32)]
    return struct.pack("<H32H8B", ONE, *idx, *([0] * 8)), [first + k for k in range(32)]


def iq2s_block(first):  # {f16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8]}
    idx = [min(first + k, 1023) for k in range(32)]
    qs = [i & 255 for i in idx]
    qh = [0] * 8
    for k, i in enumerate(idx):
        qh[k // 4] |= (i >> 8) << (2 * (k % 4))
    return struct.pack("<H32B32B8B8B", ONE, *qs, *([0] * 32), *qh, *([0] * 8)), [first + k for k in range(32)]


def iq3xxs_block(first):  # {f16 d; u8 qs[64]; u32 scales_and_signs[8]}; db = d*0.5*0.5
    idx = [min(first + k, 255) for k in range(64)]
    return struct.pack("<H64B8I", ONE, *idx, *([0] * 8)), [first + k for k in range(64)]


def iq3s_block(first):  # {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}; db = d*1
    idx = [min(first + k, 511) for k in range(64)]
    qs = [i & 255 for i in idx]
    qh = [0] * 8
    for k, i in enumerate(idx):
        qh[k // 8] |= (i >> 8) << (k % 8)
    return struct.pack("<H64B8B32B4B", ONE, *qs, *qh, *([0] * 32), *([0] * 4)), [first + k for k in range(64)]


def iq1s_table():  # {f16 d; u8 qs[32]; u16 qh[8]}; value = d*1*(grid + 1/8)
    table = [None] * 2048
    for first in range(0, 2048, 32):
        idx = [first + k for k in range(32)]
        qs = [i & 255 for i in idx]
        qh = [0] * 8
        for k, i in enumerate(idx):
            qh[k // 4] |= (i >> 8) << (3 * (k % 4))
        vals = decode("dequantize_row_iq1_s", struct.pack("<H32B8H", ONE, *qs, *qh), 256)
        for k, i in enumerate(idx):
            table[i] = [exact(v - 0.125, 1.0) for v in vals[8 * k:8 * k + 8]]
    return table


def values16(fn, block):
    vals = decode(fn, block, 32)
    return [exact(v, 1.0) for v in vals[:16]]


def pack_u64(entry):
    return sum((b & 255) << (8 * j) for j, b in enumerate(entry))


def pack_u32(entry):
    return sum((b & 255) << (8 * j) for j, b in enumerate(entry))


def emit_u64(name, table):
    lines = [f"const uint64_t {name}[{len(table)}] = {{"]
    for i in range(0, len(table), 4):
        lines.append("    " + ", ".join(f"0x{pack_u64(e):016x}ull" for e in table[i:i + 4]) + ",")
    lines.append("};")
    return "\n".join(lines)


def emit_u32(name, table):
    lines = [f"const uint32_t {name}[{len(table)}] = {{"]
    for i in range(0, len(table), 8):
        lines.append("    " + ", ".join(f"0x{pack_u32(e):08x}u" for e in table[i:i + 8]) + ",")
    lines.append("};")
    return "\n".join(lines)


def main():
    iq2xs = grid_u8("dequantize_row_iq2_xs", 512, 8, iq2xs_block, 0.125)
    iq2s = grid_u8("dequantize_row_iq2_s", 1024, 8, iq2s_block, 0.125)
    iq3xxs = grid_u8("dequantize_row_iq3_xxs", 256, 4, iq3xxs_block, 0.25)
    iq3s = grid_u8("dequantize_row_iq3_s", 512, 4, iq3s_block, 1.0)
    iq1s = iq1s_table()
    # IQ4_NL block {f16 d; u8 qs[16]}: byte j holds codes j (low) and 16+j (high).
    iq4nl = values16("dequantize_row_iq4_nl", struct.pack("<H16B", ONE, *[j for j in range(16)]))
    # MXFP4 block {u8 e; u8 qs[16]}: e = 128 decodes to the scale 1.0 (ggml's E8M0 "half").
    mxfp4 = values16("dequantize_row_mxfp4", struct.pack("<B16B", 128, *[j for j in range(16)]))
    out = [
        "// Generated by scripts/gen_quant_grids.py from llama.cpp v0.5.0's libggml-base.so decoders",
        "// (npm @node-llama-cpp/linux-x64@3.22.1). Do not edit: regenerate. These lattices and value",
        "// tables are part of the GGUF formats; tests/unit/quant_ext checks every decoder against ggml.",
        '#include "quant/iq_grids.h"',
        "",
        "namespace ds4::quant {",
        "",
        "// IQ1_S / IQ1_M: 2048 points of {-1, 0, +1}^8, one signed byte per weight.",
        emit_u64("iq1s_grid", iq1s),
        "",
        "// IQ2_XS: 512 points, byte j = magnitude of weight j (8, 25 or 43).",
        emit_u64("iq2xs_grid", iq2xs),
        "",
        "// IQ2_S: 1024 points, same magnitudes as IQ2_XS.",
        emit_u64("iq2s_grid", iq2s),
        "",
        "// IQ3_XXS: 256 points of 4 magnitudes.",
        emit_u32("iq3xxs_grid", iq3xxs),
        "",
        "// IQ3_S: 512 points of 4 magnitudes.",
        emit_u32("iq3s_grid", iq3s),
        "",
        "// IQ4_NL / IQ4_XS: the 16 non-linear levels.",
        "const int8_t kvalues_iq4nl[16] = {" + ", ".join(str(v) for v in iq4nl) + "};",
        "",
        "// MXFP4: E2M1 values times 2 (the block scale is stored as half of 2^(e-127)).",
        "const int8_t kvalues_mxfp4[16] = {" + ", ".join(str(v) for v in mxfp4) + "};",
        "",
        "}  // namespace ds4::quant",
        "",
    ]
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
