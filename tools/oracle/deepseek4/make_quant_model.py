#!/usr/bin/env python3
"""Writes a small random DeepSeek V4 checkpoint (config.json + float32 model.safetensors, in
transformers' save_pretrained naming) whose expert rows are 256 wide, so that convert-hf can
apply the published flash-q2 / flash-q4 recipes (K-quant and IQ2_XXS rows are 256 values).

Pure Python (no torch/numpy), deterministic for a seed. The weight spread follows
make_fixtures.py's randomize(): ~7% of routed-expert gate/up pre-activations beyond the SwiGLU
clamp, non-zero HC bases, sinks, position biases and selection bias.

Usage: python3 make_quant_model.py OUT_DIR [--seed 44]
The quantized GGUF made from it, and transformers' logits for the dequantized weights
(quant_reference.py on the device), are the committed quant_small fixture.
"""
import json
import math
import os
import random
import struct
import sys

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

CFG = dict(
    architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4", dtype="float32",
    vocab_size=256, hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
    partial_rotary_factor=0.25, q_lora_rank=32, o_groups=2, o_lora_rank=16,
    n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=256, n_shared_experts=1,
    sliding_window=64, layer_types=[SWA, CSA, HCA], mlp_layer_types=["hash_moe", "hash_moe", "moe"],
    compress_rates={CSA: 4, HCA: 128}, index_n_heads=16, index_head_dim=32, index_topk=16,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, rope_theta=10000.0,
    compress_rope_theta=160000.0, swiglu_limit=10.0, routed_scaling_factor=1.5, norm_topk_prob=True,
    scoring_func="sqrtsoftplus", max_position_embeddings=1048576, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=1, num_nextn_predict_layers=0, num_hidden_layers=3,
    rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32.0, "beta_slow": 1.0},
)


def tensors(c, rng):
    """Yields (name, dtype, shape, values) in save_pretrained naming, HF [out, in] order."""
    H, V, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    nh, hd, qlr = c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    og, olr = c["o_groups"], c["o_lora_rank"]
    E, I, k = c["n_routed_experts"], c["moe_intermediate_size"], c["num_experts_per_tok"]
    ih, ihd = c["index_n_heads"], c["index_head_dim"]
    mix = (2 + hc) * hc

    def normal(shape, std, mean=0.0):
        n = 1
        for d in shape:
            n *= d
        return [rng.gauss(mean, std) for _ in range(n)]

    def lin(name, out_f, in_f, gain=1.0):
        return (name, "F32", [out_f, in_f], normal([out_f, in_f], gain / math.sqrt(in_f)))

    def norm(name, n):
        return (name, "F32", [n], normal([n], 0.2, 1.0))

    def hc_block(prefix):
        return [(prefix + "_fn", "F32", [mix, hc * H], normal([mix, hc * H], 1.0 / math.sqrt(hc * H))),
                (prefix + "_base", "F32", [mix], normal([mix], 0.5)),
                (prefix + "_scale", "F32", [3], [0.5 + rng.random() for _ in range(3)])]

    out = [("model.embed_tokens.weight", "F32", [V, H], normal([V, H], 1.0)),
           lin("head.weight", V, H),
           norm("model.norm.weight", H),
           ("model.hc_head.hc_fn", "F32", [hc, hc * H], normal([hc, hc * H], 1.0 / math.sqrt(hc * H))),
           ("model.hc_head.hc_base", "F32", [hc], normal([hc], 0.5)),
           ("model.hc_head.hc_scale", "F32", [1], [0.5 + rng.random()])]
    rates = {SWA: 0, CSA: 4, HCA: 128}
    for il, lt in enumerate(c["layer_types"]):
        p = f"model.layers.{il}."
        out += hc_block(p + "hc_attn")
        out += [norm(p + "attn_norm.weight", H),
                lin(p + "attn.wq_a.weight", qlr, H), norm(p + "attn.q_norm.weight", qlr),
                lin(p + "attn.wq_b.weight", nh * hd, qlr),
                lin(p + "attn.wkv.weight", hd, H), norm(p + "attn.norm.weight", hd),
                (p + "attn.attn_sink", "F32", [nh], normal([nh], 1.0)),
                lin(p + "attn.wo_a.weight", og * olr, nh * hd // og),
                lin(p + "attn.wo_b.weight", H, og * olr)]
        r = rates[lt]
        if r:
            lanes = 2 if r == 4 else 1
            out += [(p + "attn.compressor.ape", "F32", [r, lanes * hd], normal([r, lanes * hd], 1.0)),
                    lin(p + "attn.compressor.wkv.weight", lanes * hd, H),
                    lin(p + "attn.compressor.wgate.weight", lanes * hd, H),
                    norm(p + "attn.compressor.norm.weight", hd)]
        if r == 4:
            out += [lin(p + "attn.indexer.wq_b.weight", ih * ihd, qlr),
                    lin(p + "attn.indexer.weights_proj.weight", ih, H),
                    (p + "attn.indexer.compressor.ape", "F32", [4, 2 * ihd], normal([4, 2 * ihd], 1.0)),
                    lin(p + "attn.indexer.compressor.wkv.weight", 2 * ihd, H),
                    lin(p + "attn.indexer.compressor.wgate.weight", 2 * ihd, H),
                    norm(p + "attn.indexer.compressor.norm.weight", ihd)]
        out += hc_block(p + "hc_ffn")
        out += [norm(p + "ffn_norm.weight", H), lin(p + "ffn.gate.weight", E, H, 2.0)]
        if c["mlp_layer_types"][il] == "hash_moe":
            ids = []
            for _ in range(V):
                ids += rng.sample(range(E), k)
            out.append((p + "ffn.gate.tid2eid", "I64", [V, k], ids))
        else:
            out.append((p + "ffn.gate.bias", "F32", [E], normal([E], 0.5)))
        for e in range(E):
            out += [lin(p + f"ffn.experts.{e}.w1.weight", I, H, 6.0),
                    lin(p + f"ffn.experts.{e}.w3.weight", I, H, 6.0),
                    lin(p + f"ffn.experts.{e}.w2.weight", H, I, 0.3)]
        out += [lin(p + "ffn.shared_experts.w1.weight", I, H, 6.0),
                lin(p + "ffn.shared_experts.w3.weight", I, H, 6.0),
                lin(p + "ffn.shared_experts.w2.weight", H, I, 0.3)]
    return out


def write_safetensors(path, ts):
    header, blobs, off = {}, [], 0
    for name, dtype, shape, vals in ts:
        b = struct.pack(f"<{len(vals)}{'f' if dtype == 'F32' else 'q'}", *vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 44
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CFG, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors(CFG, rng))
    toks = [rng.randrange(CFG["vocab_size"]) for _ in range(256)]
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump({"tokens": toks}, f)


if __name__ == "__main__":
    main()
