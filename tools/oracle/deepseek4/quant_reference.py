#!/usr/bin/env python3
"""transformers reference logits for a deepseek4 GGUF: every tensor is decoded with ggml's own
dequantize_row_* (libggml-base.so of llama.cpp v0.5.0, via ctypes), mapped back to
transformers' module names with the table below (written from spec §3, independently of the C++
converter), loaded strictly into DeepseekV4ForCausalLM, and evaluated.

So an engine running the quantized GGUF can be compared with a float reference that used
exactly the same (dequantized) weights.

Usage: python3 quant_reference.py LIBGGML_BASE CONFIG_JSON TOKENS_JSON OUT_DIR GGUF [GGUF ...]
Writes OUT_DIR/<gguf basename>.logits.f32 ([n_tokens][vocab] LE float32, prefill without cache)
and OUT_DIR/<gguf basename>.meta.json (decode-vs-prefill agreement, versions).
"""
import ctypes
import json
import os
import struct
import sys
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

import transformers  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402

# ggml type id -> (name, block elems, block bytes)
TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 8: ("q8_0", 32, 34), 10: ("q2_K", 256, 84),
         12: ("q4_K", 256, 144), 16: ("iq2_xxs", 256, 66), 26: ("i32", 1, 4)}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode()
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
        raise ValueError(f"bad gguf value type {t}")

    assert take("I") == 0x46554747, "not a GGUF"
    assert take("I") == 3
    n_t, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    return kv, infos, data, base


def decode(lib, data, off, ne, t):
    n = 1
    for d in ne:
        n *= d
    name, be, bb = TYPES[t]
    nbytes = n // be * bb
    raw = data[off:off + nbytes]
    if t == 0:
        out = torch.frombuffer(bytearray(raw), dtype=torch.float32)
    elif t == 1:
        out = torch.frombuffer(bytearray(raw), dtype=torch.float16).float()
    elif t == 26:
        out = torch.frombuffer(bytearray(raw), dtype=torch.int32).long()
    else:
        out = torch.empty(n, dtype=torch.float32)
        fn = getattr(lib, "dequantize_row_" + name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        buf = ctypes.create_string_buffer(raw, nbytes)
        fn(buf, ctypes.c_void_p(out.data_ptr()), n)
    return out.reshape(list(reversed(ne)))


# GGUF per-layer suffix -> transformers module path under model.layers.N.
LAYER = {
    "hc_attn_fn.weight": "attn_hc.fn", "hc_attn_base.weight": "attn_hc.base", "hc_attn_scale.weight": "attn_hc.scale",
    "hc_ffn_fn.weight": "ffn_hc.fn", "hc_ffn_base.weight": "ffn_hc.base", "hc_ffn_scale.weight": "ffn_hc.scale",
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight", "attn_q_a_norm.weight": "self_attn.q_a_norm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight", "attn_kv.weight": "self_attn.kv_proj.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_norm.weight", "attn_sinks.weight": "self_attn.sinks",
    "attn_output_a.weight": "self_attn.o_a_proj.weight", "attn_output_b.weight": "self_attn.o_b_proj.weight",
    "attn_compressor_ape.weight": "self_attn.compressor.position_bias",
    "attn_compressor_kv.weight": "self_attn.compressor.kv_proj.weight",
    "attn_compressor_gate.weight": "self_attn.compressor.gate_proj.weight",
    "attn_compressor_norm.weight": "self_attn.compressor.kv_norm.weight",
    "indexer.attn_q_b.weight": "self_attn.compressor.indexer.q_b_proj.weight",
    "indexer.proj.weight": "self_attn.compressor.indexer.scorer.weights_proj.weight",
    "indexer_compressor_ape.weight": "self_attn.compressor.indexer.position_bias",
    "indexer_compressor_kv.weight": "self_attn.compressor.indexer.kv_proj.weight",
    "indexer_compressor_gate.weight": "self_attn.compressor.indexer.gate_proj.weight",
    "indexer_compressor_norm.weight": "self_attn.compressor.indexer.kv_norm.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight", "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_tid2eid.weight": "mlp.gate.tid2eid",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
    "ffn_down_exps.weight": "mlp.experts.down_proj",
}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
          "output_norm.weight": "model.norm.weight", "output_hc_fn.weight": "model.hc_head.hc_fn",
          "output_hc_base.weight": "model.hc_head.hc_base", "output_hc_scale.weight": "model.hc_head.hc_scale"}


def state_dict_from_gguf(lib, path):
    kv, infos, data, base = read_gguf(path)
    sd, gate, up, types = {}, {}, {}, {}
    for name, ne, t, off in infos:
        x = decode(lib, data, base + off, ne, t)
        types[name] = TYPES[t][0]
        if name in GLOBAL:
            sd[GLOBAL[name]] = x
            continue
        _, il, suffix = name.split(".", 2)
        p = f"model.layers.{il}."
        if suffix == "ffn_gate_exps.weight":
            gate[il] = x
        elif suffix == "ffn_up_exps.weight":
            up[il] = x
        else:
            sd[p + LAYER[suffix]] = x
    for il in gate:  # transformers stacks gate then up rows per expert: [E, 2I, H]
        sd[f"model.layers.{il}.mlp.experts.gate_up_proj"] = torch.cat([gate[il], up[il]], dim=1)
    return sd, types


def main():
    libpath, cfg_path, tok_path, out_dir = sys.argv[1:5]
    ggufs = sys.argv[5:]
    lib = ctypes.CDLL(libpath)
    cfg = DeepseekV4Config.from_json_file(cfg_path)
    ids = torch.tensor([json.load(open(tok_path))["tokens"]])
    os.makedirs(out_dir, exist_ok=True)
    for g in ggufs:
        t0 = time.time()
        sd, types = state_dict_from_gguf(lib, g)
        model = DeepseekV4ForCausalLM(cfg).float().eval()
        missing = model.load_state_dict(sd, strict=True)  # raises on any missing/unexpected name
        with torch.no_grad():
            ref = model(input_ids=ids, use_cache=False).logits[0].float()
            past, rows = None, []
            for t in range(ids.shape[1]):
                o = model(input_ids=ids[:, t:t + 1], past_key_values=past,
                          position_ids=torch.tensor([[t]]), use_cache=True)
                past = o.past_key_values
                rows.append(o.logits[0, -1].float())
            dec = torch.stack(rows)
        stem = os.path.basename(g).rsplit(".", 1)[0]
        ref.contiguous().numpy().astype("<f4").tofile(os.path.join(out_dir, stem + ".logits.f32"))
        meta = {"gguf": os.path.basename(g), "n_tokens": ids.shape[1],
                "decode_vs_prefill_max_abs_diff": float((dec - ref).abs().max()),
                "decode_vs_prefill_argmax_agree": float((dec.argmax(-1) == ref.argmax(-1)).float().mean()),
                "tensor_types": types, "load_state_dict": str(missing),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                "seconds": time.time() - t0}
        json.dump(meta, open(os.path.join(out_dir, stem + ".meta.json"), "w"), indent=1)
        print(stem, {k: meta[k] for k in ("decode_vs_prefill_max_abs_diff", "decode_vs_prefill_argmax_agree",
                                          "seconds")}, flush=True)


if __name__ == "__main__":
    main()
