#!/usr/bin/env python3
"""Which ggml tensor types llama.cpp's llama-quantize writes for a DeepSeek V4 GGUF, per file type.

Runs llama_model_quantize of llama.cpp v0.5.0 (npm @node-llama-cpp/linux-x64, installed by
scripts/setup.sh) on the given GGUF (default models/ds4-demo.gguf) for each DeepSeek-relevant
LLAMA_FTYPE and prints the tensor types of each result (read back with ggml's gguf reader).
Usage: python3 scripts/llama_quantize_types.py [model.gguf] [outdir]
"""
import collections
import ctypes
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = os.path.join(ROOT, "third_party/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
base = ctypes.CDLL(D + "/libggml-base.so", mode=ctypes.RTLD_GLOBAL)
ggml = ctypes.CDLL(D + "/libggml.v0.5.0.so", mode=ctypes.RTLD_GLOBAL)
llama = ctypes.CDLL(D + "/libllama.v0.5.0.so", mode=ctypes.RTLD_GLOBAL)
ggml.ggml_backend_load_all_from_path(D.encode())
llama.llama_backend_init()


class Params(ctypes.Structure):  # oversized; the library writes only its own prefix
    _fields_ = [("b", ctypes.c_ubyte * 512)]


class GgufInit(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


llama.llama_model_quantize_default_params.restype = Params
base.gguf_init_from_file.restype = ctypes.c_void_p
base.gguf_init_from_file.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
base.gguf_free.argtypes = [ctypes.c_void_p]
base.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
base.gguf_get_n_tensors.restype = ctypes.c_int64
base.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
base.gguf_get_tensor_name.restype = ctypes.c_char_p
base.gguf_get_tensor_type.argtypes = [ctypes.c_void_p, ctypes.c_int64]
base.gguf_get_tensor_type.restype = ctypes.c_int
base.ggml_type_name.argtypes = [ctypes.c_int]
base.ggml_type_name.restype = ctypes.c_char_p

FTYPES = [("Q4_0", 2), ("Q8_0", 7), ("Q5_0", 8), ("Q2_K", 10), ("Q3_K_S", 11), ("Q3_K_M", 12), ("Q3_K_L", 13),
          ("Q4_K_S", 14), ("Q4_K_M", 15), ("Q5_K_S", 16), ("Q5_K_M", 17), ("Q6_K", 18), ("IQ2_XXS", 19),
          ("IQ2_XS", 20), ("Q2_K_S", 21), ("IQ3_XS", 22), ("IQ3_XXS", 23), ("IQ1_S", 24), ("IQ4_NL", 25),
          ("IQ3_S", 26), ("IQ3_M", 27), ("IQ2_S", 28), ("IQ2_M", 29), ("IQ4_XS", 30), ("IQ1_M", 31),
          ("MXFP4_MOE", 38)]


def tensor_types(path):
    init = GgufInit(True, None)
    ctx = base.gguf_init_from_file(path.encode(), ctypes.byref(init))
    types = collections.defaultdict(list)
    for i in range(base.gguf_get_n_tensors(ctx)):
        types[base.ggml_type_name(base.gguf_get_tensor_type(ctx, i)).decode()].append(
            base.gguf_get_tensor_name(ctx, i).decode())
    base.gguf_free(ctx)
    return types


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models/ds4-demo.gguf")
    out_dir = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="ds4_lq_")
    for name, ft in FTYPES:
        p = bytearray(llama.llama_model_quantize_default_params().b)
        if p[4:8] != (7).to_bytes(4, "little") or p[17] != 1:
            raise SystemExit("llama_model_quantize_default_params: unexpected layout (not llama.cpp v0.5.0?)")
        p[0:4] = (2).to_bytes(4, "little")  # nthread
        p[4:8] = ft.to_bytes(4, "little")   # ftype
        p[16] = 1                           # allow_requantize (the demo model is Q8_0)
        out = os.path.join(out_dir, f"{name}.gguf")
        if llama.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(Params.from_buffer_copy(bytes(p)))):
            print(f"{name}: refused (see llama.cpp's message above)", flush=True)
            continue
        t = tensor_types(out)
        print(f"{name}: " + ", ".join(f"{k} x{len(v)}" for k, v in sorted(t.items())), flush=True)
        os.remove(out)


if __name__ == "__main__":
    main()
