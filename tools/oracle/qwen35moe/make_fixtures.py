#!/usr/bin/env python3
"""Reference fixtures for Qwen3.5/3.6 MoE (`qwen3_5_moe`, text model only): tiny random
Qwen3_5MoeForCausalLM models run by HF transformers (the float oracle).

Runs where torch + transformers (5.17) exist (the GPU device machine; its CPU is enough, no
network). For each config below it writes, under OUT/<name>/:
  config.json, model.safetensors   save_pretrained output (float32)
  tokens.json                      {"tokens": [...]} the evaluated token ids
  logits.f32                       float32 LE [n_tokens][vocab], one prefill without cache
                                   (the chunked gated-delta-rule path, chunk 64)
  logits_decode.f32                same, one token at a time through the cache (the recurrent
                                   gated-delta-rule path and the conv-state update); written
                                   only with --keep-decode
  layer_out.f32                    float32 LE [n_layers][n_dbg][hidden]: every decoder layer's
                                   output for positions 0..n_dbg-1 (prefill), for debugging an
                                   engine layer by layer
  meta.json                        versions, effective config, saved tensor names/shapes, the
                                   RoPE inv_freq used, which kernels ran (torch fallbacks vs
                                   FLA / causal-conv1d), and the agreement between prefill /
                                   cached prefill / chunked prefill / decode / float64

Usage: python3 make_fixtures.py OUT_DIR [--keep-decode] [--only NAME ...]
Environment: DEVICE (default cpu).
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
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig  # noqa: E402

LIN, FULL = "linear_attention", "full_attention"

# Layouts differ on purpose: the published interval (3 linear + 1 full), full attention first
# and in the middle, and the published head geometry (head_dim 256 with 64 RoPE dims, DeltaNet
# heads of 128) with everything else shrunk. Every config has more value heads than key heads
# (grouped value attention) and a prompt longer than one 64-token chunk of the chunked rule.
CONFIGS = {
    # The published layer interval at toy width.
    "hybrid_tiny": dict(
        seed=101, n_tokens=80, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                 linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                 num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                 shared_expert_intermediate_size=16,
                 layer_types=[LIN, LIN, LIN, FULL])),
    # Full attention first and in the middle, top-4 of 16 experts, 4 query heads on 2 KV heads,
    # 3 value heads per key head.
    "mixed_small": dict(
        seed=202, n_tokens=150, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, linear_num_key_heads=2, linear_num_value_heads=6,
                 linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                 num_experts=16, num_experts_per_tok=4, moe_intermediate_size=8,
                 shared_expert_intermediate_size=16,
                 layer_types=[FULL, LIN, LIN, FULL, LIN, LIN])),
    # Qwen3.6-35B-A3B head geometry: attention head_dim 256 with partial RoPE 0.25 (64 dims),
    # 2 q heads on 1 KV head; DeltaNet heads of 128 with 2 value heads per key head; top-8 of 16
    # experts. Width 32 keeps the file small.
    "qwen36_geom": dict(
        seed=303, n_tokens=130, n_dbg=16,
        cfg=dict(vocab_size=256, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=256, linear_num_key_heads=1, linear_num_value_heads=2,
                 linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                 num_experts=16, num_experts_per_tok=8, moe_intermediate_size=16,
                 shared_expert_intermediate_size=16,
                 layer_types=[LIN, FULL])),
}

COMMON = dict(hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=4096,
              tie_word_embeddings=False, attention_bias=False, bos_token_id=0, eos_token_id=1,
              router_aux_loss_coef=0.001)


def log(*a):
    print(*a, flush=True)


def make_config(spec):
    kw = dict(COMMON)
    kw.update(spec["cfg"])
    kw["num_hidden_layers"] = len(kw["layer_types"])
    head_dim = kw["head_dim"]
    n_freq = int(head_dim * 0.25) // 2
    # mrope_section must cover the rotary frequencies; text positions are equal on all three
    # M-RoPE axes, so the split does not change the result, only keeps the indexing in range.
    sec = [n_freq - 2 * (n_freq // 3), n_freq // 3, n_freq // 3]
    kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0,
                             "partial_rotary_factor": 0.25, "mrope_section": sec,
                             "mrope_interleaved": True}
    try:
        return Qwen3_5MoeTextConfig(**kw)
    except Exception as e:  # a keyword this transformers rejects: report, retry plainly
        log("config kwargs rejected:", e, "- retrying without rope mrope keys")
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0,
                                 "partial_rotary_factor": 0.25}
        return Qwen3_5MoeTextConfig(**kw)


def randomize(model, cfg, gen):
    """Overwrite every parameter with seeded values of a deliberate spread: activations of
    order 1, decays exp(g) spread over (~0.3, ~1) so the recurrent state carries information
    across many tokens, beta over (0, 1), non-trivial zero-centred norm weights (the RMSNorm
    multiplies by 1 + w), and a router spread that makes top-k choices vary by token."""

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float64).mul_(std).add_(mean).float()

    def uniform(shape, lo, hi):
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).float()

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("A_log"):
                # A in (0.02, 0.6): g = -A * softplus(a + dt_bias) mostly in (-1.5, 0)
                p.copy_(uniform(shape, 0.02, 0.6).log())
            elif name.endswith("dt_bias"):
                p.copy_(normal(shape, 0.5))
            elif name.endswith("conv1d.weight"):  # [conv_dim, 1, K]
                p.copy_(normal(shape, 0.5))
            elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: plain scale
                p.copy_(normal(shape, 0.2, 1.0))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(normal(shape, 1.0))
            elif name.endswith("lm_head.weight"):
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[1])))
            elif ".experts.gate_up_proj" in name:  # [E, 2I, H]
                p.copy_(normal(shape, 2.0 / math.sqrt(shape[-1])))
            elif ".experts.down_proj" in name:  # [E, H, I]
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[-1])))
            elif ".experts." in name:  # per-expert linears, if this version keeps them
                p.copy_(normal(shape, 1.5 / math.sqrt(shape[-1])))
            elif name.endswith("mlp.gate.weight"):  # router [E, H]
                p.copy_(normal(shape, 3.0 / math.sqrt(shape[-1])))
            elif name.endswith("shared_expert_gate.weight"):  # [1, H]
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[-1])))
            elif p.dim() == 1 and name.endswith("weight"):  # zero-centred RMSNorms (1 + w)
                p.copy_(normal(shape, 0.2))
            elif p.dim() == 2 and name.endswith("weight"):  # plain linears [out, in]
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[1])))
            elif p.dim() == 3:
                p.copy_(normal(shape, 1.0 / math.sqrt(shape[-1])))
            else:
                raise RuntimeError(f"no init rule for {name} {shape}")
        for name, b in model.named_buffers():
            if "inv_freq" not in name:
                log("   buffer left as constructed:", name, tuple(b.shape))


def kernel_report():
    rep = {}
    try:
        from transformers.utils import is_flash_linear_attention_available
        rep["flash_linear_attention"] = bool(is_flash_linear_attention_available())
    except Exception as e:
        rep["flash_linear_attention"] = f"unknown: {e}"
    try:
        from transformers.utils import is_causal_conv1d_available
        rep["causal_conv1d"] = bool(is_causal_conv1d_available())
    except Exception as e:
        rep["causal_conv1d"] = f"unknown: {e}"
    try:
        import importlib.util
        rep["kernels_package"] = importlib.util.find_spec("kernels") is not None
    except Exception as e:
        rep["kernels_package"] = f"unknown: {e}"
    return rep


def run_one(name, spec, out_root, device):
    t0 = time.time()
    gen = torch.Generator().manual_seed(spec["seed"])
    cfg = make_config(spec)
    log(f"== {name}: layer_types={cfg.layer_types}")
    log("   rope_parameters:", json.dumps(cfg.rope_parameters, default=str))
    model = Qwen3_5MoeForCausalLM(cfg).float().eval()
    try:
        model.config._attn_implementation = "eager"
    except Exception:
        pass
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:
            log("   set_experts_implementation(eager) failed:", e)
    randomize(model, cfg, gen)
    model = model.to(device)

    n = spec["n_tokens"]
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=gen)
    ids_dev = ids.to(device)
    res = {"name": name, "n_tokens": n, "kernels": kernel_report()}

    with torch.no_grad():
        captured = []
        hooks = [layer.register_forward_hook(
            lambda mod, args, output: captured.append(output[0] if isinstance(output, tuple) else output))
            for layer in model.model.layers]
        out = model(input_ids=ids_dev, use_cache=False)
        for h in hooks:
            h.remove()
        hs = captured if len(captured) == cfg.num_hidden_layers else None
        ref = out.logits[0].float().cpu()
        res["captured_layer_outputs"] = [list(h.shape) for h in captured]
        res["logits_std"] = float(ref.std())
        assert torch.isfinite(ref).all(), "non-finite logits"

        # How much routing varies: distinct experts chosen per layer over the prompt.
        try:
            routed = []
            hook_out = []
            hks = [layer.mlp.gate.register_forward_hook(
                lambda mod, args, output: hook_out.append(output[2].cpu())) for layer in model.model.layers]
            model(input_ids=ids_dev, use_cache=False)
            for h in hks:
                h.remove()
            for t in hook_out:
                routed.append(int(torch.unique(t).numel()))
            res["distinct_experts_per_layer"] = routed
            log("   distinct routed experts per layer:", routed)
        except Exception as e:
            res["distinct_experts_per_layer"] = f"error: {e}"

        def cmp(tag, fn):
            try:
                other = fn()
                d = (other - ref).abs()
                bad = d.max(-1).values > 1e-4
                res[tag] = {"max_abs_diff": float(d.max()), "argmax_agree": float(
                    (other.argmax(-1) == ref.argmax(-1)).float().mean()),
                    "first_pos_over_1e-4": int(bad.nonzero()[0, 0]) if bad.any() else None}
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
            # Note: transformers' torch gated-delta-rule casts to float32 inside, so this
            # measures float64 everywhere except the DeltaNet recurrence.
            m64 = Qwen3_5MoeForCausalLM(cfg).eval()
            if hasattr(m64, "set_experts_implementation"):
                m64.set_experts_implementation("eager")
            m64.load_state_dict(model.state_dict())
            m64 = m64.double().to(device)
            r = m64(input_ids=ids_dev, use_cache=False).logits[0].double().cpu()
            return r.float()
        cmp("float64_prefill", f64)

    rot = model.model.rotary_emb
    res["rope"] = {"inv_freq": [float(x) for x in rot.inv_freq.cpu()],
                   "attention_scaling": float(rot.attention_scaling),
                   "params": {k: v for k, v in cfg.rope_parameters.items()}}
    rd = int(cfg.head_dim * cfg.rope_parameters.get("partial_rotary_factor", 0.25))
    want = cfg.rope_parameters["rope_theta"] ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    res["rope"]["max_rel_diff_vs_formula"] = float(((rot.inv_freq.cpu().double() - want).abs() / want).max())
    log("   rope check:", res["rope"]["max_rel_diff_vs_formula"], "rotary dims", rd)

    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    model.cpu().save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump({"tokens": [int(x) for x in ids[0]]}, f)
    ref.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    if dec is not None and "--keep-decode" in sys.argv:
        dec.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits_decode.f32"))
    if hs is not None:
        nd = spec["n_dbg"]
        layers = torch.stack([h[0, :nd].float().cpu() for h in hs])  # [L, nd, H]
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
    log("kernels:", kernel_report())
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        log("conversion mapping for qwen3_5_moe_text:", get_checkpoint_conversion_mapping("qwen3_5_moe_text"))
        log("conversion mapping for qwen3_5_moe:", get_checkpoint_conversion_mapping("qwen3_5_moe"))
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
