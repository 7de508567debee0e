#!/usr/bin/env python3
"""Reference fixtures for DeepSeek V4: tiny random DeepseekV4ForCausalLM models run by HF
transformers (the float oracle, see docs/ARCHITECTURE.md "Correctness oracles").

Runs where torch + transformers (5.17) exist (the GPU device machine); no network needed.
For each config below it writes, under OUT/<name>/:
  config.json, model.safetensors   save_pretrained output (float32)
  tokens.json                      {"tokens": [...]} the evaluated token ids
  logits.f32                       float32 LE [n_tokens][vocab], one prefill without cache
  logits_decode.f32                same, one token at a time through the cache (only with
                                   --keep-decode; not committed: it matches logits.f32 to ~1e-5)
  layer_out.f32                    float32 LE [n_layers][n_dbg][hc_mult][hidden]: every
                                   decoder layer's HC-stream output for positions 0..n_dbg-1
                                   (prefill), for debugging an engine layer by layer
  meta.json                        versions, config summary, saved tensor names/shapes,
                                   RoPE inv_freq actually used, and the agreement between
                                   prefill / cached prefill / chunked prefill / decode / f64

Usage: python3 make_fixtures.py OUT_DIR [--keep-decode] [--only NAME ...]
"""
import json
import math
import os
import sys
import time
import traceback

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

import transformers  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

# YaRN exactly as the Flash checkpoint ships it. max_position_embeddings = factor * original
# so that transformers' two ways of deriving the factor (the key, or max/original) agree.
YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
        "beta_fast": 32.0, "beta_slow": 1.0}

CONFIGS = {
    # Two sliding-only layers with a small head: the first thing an engine should match.
    "swa_tiny": dict(
        seed=11, n_tokens=48, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=32, num_attention_heads=2, head_dim=32,
                 partial_rotary_factor=0.25, q_lora_rank=16, o_groups=2, o_lora_rank=16,
                 n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                 sliding_window=8, layer_types=[SWA, SWA], mlp_layer_types=["hash_moe", "moe"],
                 index_n_heads=16, index_head_dim=32, index_topk=8)),
    # Small non-Flash head geometry; every layer kind: SWA, CSA (ratio 4, indexer top-k 8 of up
    # to 75 rows), HCA (ratio 128), hash layers 0-2 (one of them CSA), top-3 routing after.
    "mixed_small": dict(
        seed=22, n_tokens=300, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=64, num_attention_heads=4, head_dim=64,
                 partial_rotary_factor=0.25, q_lora_rank=32, o_groups=2, o_lora_rank=16,
                 n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=16,
                 sliding_window=16, layer_types=[SWA, SWA, CSA, HCA, CSA, HCA],
                 mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 3,
                 index_n_heads=16, index_head_dim=32, index_topk=8, rope_parameters=dict(YARN))),
    # Flash head geometry (head_dim 512, 64 RoPE dims, indexer dim 128, ratios 4/128, 4 HC
    # streams, window 128) with everything else shrunk, so llama.cpp's deepseek4 can run it.
    "flash_geom": dict(
        seed=33, n_tokens=512, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=64, num_attention_heads=2, head_dim=512,
                 partial_rotary_factor=0.125, q_lora_rank=32, o_groups=2, o_lora_rank=32,
                 n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                 sliding_window=128, layer_types=[SWA, CSA, HCA],
                 mlp_layer_types=["hash_moe", "hash_moe", "moe"],
                 index_n_heads=16, index_head_dim=128, index_topk=16, rope_parameters=dict(YARN))),
}

COMMON = dict(num_key_value_heads=1, n_shared_experts=1, hc_mult=4, hc_sinkhorn_iters=20,
              hc_eps=1e-6, rms_norm_eps=1e-6, rope_theta=10000.0, compress_rope_theta=160000.0,
              swiglu_limit=10.0, routed_scaling_factor=1.5, norm_topk_prob=True,
              scoring_func="sqrtsoftplus", max_position_embeddings=1048576,
              tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
              compress_rates={CSA: 4, HCA: 128}, num_nextn_predict_layers=0,
              torch_dtype="float32")


# Counts routed-expert gate/up values beyond the SwiGLU limit during the reference prefill,
# to show that the clamp is exercised by these random weights.
CLAMP = {"clamped": 0, "total": 0, "counting": True}


def install_clamp_counter():
    try:
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdl
    except Exception as e:
        log("cannot import modeling module:", e)
        return
    orig = mdl.DeepseekV4Experts._apply_gate

    def counting(self, gate_up):
        if CLAMP["counting"]:
            g, u = gate_up.chunk(2, dim=-1)
            CLAMP["clamped"] += int((g > self.limit).sum()) + int((u.abs() > self.limit).sum())
            CLAMP["total"] += g.numel() + u.numel()
        return orig(self, gate_up)
    mdl.DeepseekV4Experts._apply_gate = counting


def log(*a):
    print(*a, flush=True)


def make_config(spec):
    kw = dict(COMMON)
    kw.update(spec["cfg"])
    kw["num_hidden_layers"] = len(kw["layer_types"])
    try:
        return DeepseekV4Config(**kw)
    except TypeError as e:  # an argument name this transformers does not know
        log("config kwargs rejected:", e, "- retrying without torch_dtype/num_nextn")
        kw.pop("torch_dtype", None)
        return DeepseekV4Config(**kw)


def randomize(model, cfg, gen):
    """Overwrite every parameter and buffer with seeded values of a deliberate spread:
    activations of order 1, expert pre-activations that cross the SwiGLU clamp (|x|>10) a few
    percent of the time, non-zero HC bases / sinks / position biases / selection bias, and a
    random hash table with distinct experts per token."""
    H = cfg.hidden_size

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float64).mul_(std).add_(mean).float()

    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            shape = tuple(p.shape)
            leaf = name.split(".")[-1]
            if "inv_freq" in name:
                continue
            if name.endswith("tid2eid"):
                k = shape[1]
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[:k] for _ in range(shape[0])]
                p.copy_(torch.stack(rows).to(p.dtype))
                continue
            if name.endswith("e_score_correction_bias"):
                p.copy_(normal(shape, 0.5))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(normal(shape, 1.0))
            elif name.endswith("lm_head.weight"):
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[1])))
            elif ".experts.gate_up_proj" in name:
                # [E, 2I, H]: std 6/sqrt(H) on an RMS-normed input -> pre-activation std ~6,
                # so roughly 10% of gate/up values are clamped at +-10.
                p.copy_(normal(shape, 6.0 / math.sqrt(shape[-1])))
            elif ".experts.down_proj" in name:
                p.copy_(normal(shape, 0.3 / math.sqrt(shape[-1])))
            elif "shared_experts" in name and ("gate_proj" in name or "up_proj" in name):
                p.copy_(normal(shape, 6.0 / math.sqrt(shape[-1])))
            elif "shared_experts" in name:
                p.copy_(normal(shape, 0.3 / math.sqrt(shape[-1])))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(normal(shape, 2.0 / math.sqrt(shape[-1])))
            elif name.endswith("_hc.fn") or name.endswith("hc_head.hc_fn"):
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[-1])))
            elif name.endswith("_hc.base") or name.endswith("hc_head.hc_base"):
                p.copy_(normal(shape, 0.5))
            elif name.endswith("_hc.scale") or name.endswith("hc_head.hc_scale"):
                p.copy_(0.5 + torch.rand(shape, generator=gen, dtype=torch.float64).float())
            elif name.endswith("sinks"):
                p.copy_(normal(shape, 1.0))
            elif name.endswith("position_bias"):
                p.copy_(normal(shape, 1.0))
            elif leaf == "weight" and p.dim() == 1:  # RMSNorm weights
                p.copy_(normal(shape, 0.2, 1.0))
            elif leaf == "weight" and p.dim() == 2:  # plain linears [out, in]
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[1])))
            elif p.dim() == 3:  # grouped or other 3-D weight
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[-1])))
            else:
                raise RuntimeError(f"no init rule for {name} {shape}")


def spec_yarn_inv_freq(base, rope_dim, yarn):
    """Spec §5.1 frequencies, used to check which RoPE transformers really applied."""
    k = torch.arange(rope_dim // 2, dtype=torch.float64)
    ext = base ** (-2.0 * k / rope_dim)
    if yarn is None:
        return ext
    f = yarn["factor"]
    orig = yarn["original_max_position_embeddings"]

    def corr(beta):
        return rope_dim * math.log(orig / (beta * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(corr(yarn["beta_fast"])), 0)
    high = min(math.ceil(corr(yarn["beta_slow"])), rope_dim - 1)
    if high == low:
        high += 0.001
    gamma = ((k - low) / (high - low)).clamp(0, 1)
    return ext * (1 - gamma) + (ext / f) * gamma


def run_one(name, spec, out_root, device):
    t0 = time.time()
    gen = torch.Generator().manual_seed(spec["seed"])
    cfg = make_config(spec)
    log(f"== {name}: layer_types={cfg.layer_types} mlp={cfg.mlp_layer_types}")
    log("   rope_parameters:", json.dumps(cfg.rope_parameters, default=str))
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    try:
        model.config._attn_implementation = "eager"
    except Exception:
        pass
    randomize(model, cfg, gen)
    CLAMP["counting"] = True
    model = model.to(device)

    n = spec["n_tokens"]
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=gen)
    ids_dev = ids.to(device)
    res = {"name": name, "n_tokens": n}

    with torch.no_grad():
        CLAMP.update(clamped=0, total=0)
        # Forward hooks on the decoder layers capture each layer's HC-stream output.
        captured = []
        hooks = [layer.register_forward_hook(
            lambda mod, args, output: captured.append(output[0] if isinstance(output, tuple) else output))
            for layer in model.model.layers]
        out = model(input_ids=ids_dev, use_cache=False)
        for h in hooks:
            h.remove()
        hs = captured if len(captured) == cfg.num_hidden_layers else None
        log(f"   routed experts: {CLAMP['clamped']} of {CLAMP['total']} gate/up values clamped")
        CLAMP["counting"] = False
        ref = out.logits[0].float().cpu()
        res["captured_layer_outputs"] = [list(h.shape) for h in captured]
        assert torch.isfinite(ref).all(), "non-finite logits"

        def cmp(tag, fn):
            try:
                other = fn()
                d = (other - ref).abs()
                res[tag] = {"max_abs_diff": float(d.max()), "argmax_agree": float(
                    (other.argmax(-1) == ref.argmax(-1)).float().mean()),
                    "max_abs_diff_per_pos_first_bad": int((d.max(-1).values > 1e-4).nonzero()[0, 0])
                    if (d.max(-1).values > 1e-4).any() else None}
                log(f"   {tag}: {res[tag]}")
                return other
            except Exception as e:  # record, keep going: the prefill reference is what matters
                res[tag] = {"error": f"{type(e).__name__}: {e}"}
                log(f"   {tag} FAILED:", traceback.format_exc())
                return None

        cmp("prefill_with_cache", lambda: model(input_ids=ids_dev, use_cache=True).logits[0].float().cpu())

        def chunked():
            cut = n // 2 + 3
            o1 = model(input_ids=ids_dev[:, :cut], use_cache=True)
            pos2 = torch.arange(cut, n, device=device)[None]
            o2 = model(input_ids=ids_dev[:, cut:], past_key_values=o1.past_key_values,
                       position_ids=pos2, use_cache=True)
            return torch.cat([o1.logits[0], o2.logits[0]]).float().cpu()
        cmp("chunked_prefill", chunked)

        def decode():
            past = None
            rows = []
            for t in range(n):
                o = model(input_ids=ids_dev[:, t:t + 1], past_key_values=past,
                          position_ids=torch.tensor([[t]], device=device), use_cache=True)
                past = o.past_key_values
                rows.append(o.logits[0, -1].float().cpu())
            return torch.stack(rows)
        dec = cmp("decode", decode)

        def f64():
            m64 = DeepseekV4ForCausalLM(cfg).eval()
            if hasattr(m64, "set_experts_implementation"):  # grouped_mm has no float64 kernel
                m64.set_experts_implementation("eager")
            m64.load_state_dict(model.state_dict())
            m64 = m64.double().to(device)
            r = m64(input_ids=ids_dev, use_cache=False).logits[0].double().cpu()
            return r.float()
        cmp("float64_prefill", f64)

    # RoPE actually used vs the spec formula.
    rot = model.model.rotary_emb
    rope = {}
    for lt in ("main", "compress"):
        buf = getattr(rot, f"{lt}_inv_freq", None)
        if buf is None:
            continue
        rp = cfg.rope_parameters[lt]
        rd = int(cfg.head_dim * rp.get("partial_rotary_factor", cfg.partial_rotary_factor))
        yarn = rp if rp.get("rope_type") == "yarn" else None
        want = spec_yarn_inv_freq(rp["rope_theta"], rd, yarn)
        rope[lt] = {"inv_freq": [float(x) for x in buf.cpu()],
                    "attention_scaling": float(getattr(rot, f"{lt}_attention_scaling")),
                    "max_rel_diff_vs_spec": float(((buf.cpu().double() - want).abs() / want).max()),
                    "params": {k: v for k, v in rp.items()}}
    res["rope"] = rope
    log("   rope check:", {k: (v["max_rel_diff_vs_spec"], v["attention_scaling"]) for k, v in rope.items()})

    res["swiglu_clamp"] = dict(CLAMP)

    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    model.cpu().save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump({"tokens": [int(x) for x in ids[0]]}, f)
    ref.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    if dec is not None and "--keep-decode" in sys.argv:  # agrees with prefill to ~1e-5 (meta.json)
        dec.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits_decode.f32"))
    if hs is not None:
        nd = spec["n_dbg"]
        layers = torch.stack([h[0, :nd].float().cpu() for h in hs])  # [L, nd, hc, H]
        res["layer_out_shape"] = list(layers.shape)
        layers.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "layer_out.f32"))

    from safetensors import safe_open
    saved = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), "pt") as f:
                for k in f.keys():
                    saved[k] = [str(f.get_slice(k).get_dtype()), list(f.get_slice(k).get_shape())]
    res["saved_tensors"] = saved
    res["state_dict_names"] = sorted(model.state_dict().keys())
    res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                       "python": sys.version.split()[0]}
    res["config_effective"] = json.loads(cfg.to_json_string())
    res["seconds"] = time.time() - t0
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    log(f"   wrote {d} ({len(saved)} tensors) in {res['seconds']:.1f}s; files:",
        {fn: os.path.getsize(os.path.join(d, fn)) for fn in sorted(os.listdir(d))})


def main():
    out_root = sys.argv[1]
    only = sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else list(CONFIGS)
    device = os.environ.get("DEVICE", "cpu")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    log("torch", torch.__version__, "transformers", transformers.__version__, "device", device)
    install_clamp_counter()
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        log("conversion mapping for deepseek_v4:", get_checkpoint_conversion_mapping("deepseek_v4"))
    except Exception as e:
        log("no conversion mapping query:", e)
    ok = True
    for name in only:
        try:
            run_one(name, CONFIGS[name], out_root, device)
        except Exception:
            ok = False
            log(f"!! {name} failed:\n" + traceback.format_exc())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
