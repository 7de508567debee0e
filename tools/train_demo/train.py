#!/usr/bin/env python3
"""Trains the small DeepSeek V4 demo model shipped as models/ds4-demo.gguf.

Runs on the GPU machine (Python 3.12, torch 2.11, transformers 5.17, tokenizers 0.23; no network)
inside ONE wall-clock budget: everything (tokenizer, training, evaluation, samples, saving) ends
before --budget seconds after start; training simply stops at its deadline.

  1. Splits the corpus (tools/train_demo/extract_corpus.sh: KJV Bible, one chapter per block)
     into train / validation (every 50th chapter of the training books, used to keep the best
     checkpoint) / held-out test (the trailing books, >= 5% of the text, never seen in training).
  2. Trains a byte-level BPE vocabulary with HF `tokenizers` on the training chapters, using the
     DeepSeek V3/V4 normalizer / pre-tokenizer / decoder (deepseek_tokenizer_pipeline.json) and
     the DeepSeek V4 special tokens (BOS = 0, EOS = 1, design spec section 9.1).
  3. Trains DeepseekV4ForCausalLM (transformers) with a small config that keeps every
     architectural feature: sliding-only, CSA (ratio 4, lightning indexer) and HCA (ratio 128)
     layers, hash-routed MoE layers (tid2eid), top-k routed layers with a selection bias,
     shared experts, hyper-connections, attention sinks, grouped output projection, YaRN.
     The Flash head geometry (head_dim 512, 64 RoPE dims, indexer dim 128, window 128, 4 HC
     streams) is kept so that llama.cpp's deepseek4 loader accepts the converted file too.
     Two things transformers' forward does not train by itself are added here, as DeepSeek does:
       * the indexer gets a KL loss towards the main attention's distribution over the
         compressed rows it selected (DeepSeek V3.2 "sparse" indexer training; the indexer's
         inputs are detached so this loss trains only the indexer);
       * top-k routers get auxiliary-loss-free load balancing: after each step the selection
         bias (e_score_correction_bias, saved as `gate.bias`) moves by +-gamma towards equal load.
  4. Saves a float32 HF checkpoint, tokenizer, reference logits (float32 forward of fixed
     prompts, to check the C++ engine) and greedy / sampled text from transformers' generate().

Output (OUT_DIR, at most 8 files come back from the device machine, 16 MiB each):
  train_log.txt                 human-readable log: config, loss curve, held-out loss, samples
  hf.tar.part-aa, -ab, ...      split tar of hf/ (config.json, model.safetensors, tokenizer.json,
                                tokenizer_config.json, generation_config.json) and ref/
                                (reference logits, token ids, tokenizer check, summary.json)
Reassemble with: cat hf.tar.part-* | tar -x -C DIR

Usage: python3 train.py --corpus .demo-data/kjv.txt --out $OUT [--budget 500] [--smoke]
"""
import argparse
import io
import json
import math
import os
import random
import re
import sys
import tarfile
import time
import traceback

T0 = time.time()

HERE = os.path.dirname(os.path.abspath(__file__))

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

# DeepSeek V4 special tokens (design spec section 9.1). BOS/EOS/pad keep the V3 ids 0/1/2; the
# others follow. The engine resolves every special token by its text, never by id.
SPECIAL_TOKENS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>",
    "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
]
BOS_ID, EOS_ID = 0, 1

VOCAB_SIZE = 4096

# YaRN exactly as the Flash checkpoint ships it (max_position_embeddings = factor * original).
YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
        "beta_fast": 32.0, "beta_slow": 1.0}

MODEL_CONFIG = dict(
    vocab_size=VOCAB_SIZE, hidden_size=256,
    # Flash head geometry: one shared K=V head of 512 dims, the last 64 rotated.
    num_attention_heads=4, num_key_value_heads=1, head_dim=512, partial_rotary_factor=0.125,
    q_lora_rank=128, o_groups=2, o_lora_rank=128, sliding_window=128,
    # Flash-like schedule: 2 sliding-only layers, then CSA / HCA alternating; hash routing in
    # the first 3 layers (one of them CSA), learned top-k routing after.
    layer_types=[SWA, SWA, CSA, HCA, CSA, HCA],
    mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 3,
    compress_rates={CSA: 4, HCA: 128},
    index_n_heads=16, index_head_dim=128, index_topk=32,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, n_shared_experts=1,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    rope_theta=10000.0, compress_rope_theta=160000.0, rope_parameters=dict(YARN),
    swiglu_limit=10.0, routed_scaling_factor=1.5, norm_topk_prob=True, scoring_func="sqrtsoftplus",
    max_position_embeddings=1048576, tie_word_embeddings=False,
    bos_token_id=BOS_ID, eos_token_id=EOS_ID, num_nextn_predict_layers=0, torch_dtype="float32",
)

# Strings whose HF token ids are saved, so the C++ tokenizer can be checked against this vocab.
TOKENIZER_CHECK = [
    "In the beginning God created the heaven and the earth.",
    "And Jesus said unto them, Verily I say unto you,",
    "Genesis 1\n\nIn the beginning",
    "  two  spaces,\ttab and\r\nCRLF\n\n\nthree newlines",
    "Numbers 12345 and 3.14159, 1,000,000!",
    "Unicode: naïve café, Ελληνικά, кириллица, 中文字符, ひらがな, カタカナ, emoji 🙂",
    "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
    "<｜User｜>Who was Moses?<｜Assistant｜></think>Moses led Israel out of Egypt.",
    "<think>reasoning</think> and a literal ｜DSML｜ marker",
    "THE LORD is my shepherd; I shall not want.",
    "don't, won't; it's (parenthesis) [brackets] {braces} \"quotes\" 'single'",
    "",
]

SAMPLE_PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;"]


def log(*a):
    line = " ".join(str(x) for x in a)
    print(f"[{time.time() - T0:7.1f}s] {line}", flush=True)
    if LOG_FILE:
        with open(LOG_FILE, "a", encoding="utf-8") as f:
            f.write(line + "\n")


LOG_FILE = None


# ----------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------

HEADING = re.compile(r"^((?:[1-3] )?[A-Z][A-Za-z ]*?) (\d+)$")


def read_chapters(path):
    """Returns [(book, chapter_text)] in order; chapter_text = 'Book N\\n\\nverse\\n...verse\\n\\n'."""
    with open(path, encoding="utf-8") as f:
        blocks = f.read().split("\n\n")
    chapters = []
    i = 0
    while i < len(blocks):
        m = HEADING.match(blocks[i].strip("\n"))
        if not m or i + 1 >= len(blocks):
            raise SystemExit(f"corpus: block {i} is not a chapter heading: {blocks[i][:60]!r}")
        body = blocks[i + 1].strip("\n")
        chapters.append((m.group(1), f"{m.group(1)} {m.group(2)}\n\n{body}\n\n"))
        i += 2
    return chapters


def split_corpus(chapters, test_fraction=0.05, val_every=50):
    total = sum(len(t) for _, t in chapters)
    books = []
    for b, _ in chapters:
        if not books or books[-1] != b:
            books.append(b)
    # Held-out test: whole trailing books, at least test_fraction of the characters.
    test_books, acc = [], 0
    for b in reversed(books):
        if acc >= test_fraction * total:
            break
        test_books.append(b)
        acc += sum(len(t) for bb, t in chapters if bb == b)
    test_books = set(test_books)
    train, val, test = [], [], []
    k = 0
    for b, t in chapters:
        if b in test_books:
            test.append(t)
        else:
            (val if k % val_every == val_every // 2 else train).append(t)
            k += 1
    return train, val, test, [b for b in books if b in test_books]


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------

def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    with open(os.path.join(HERE, "deepseek_tokenizer_pipeline.json"), encoding="utf-8") as f:
        pipe = json.load(f)
    skeleton = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": pipe["normalizer"], "pre_tokenizer": pipe["pre_tokenizer"],
        "post_processor": pipe["post_processor"], "decoder": pipe["decoder"],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {}, "merges": []},
    }
    tok = Tokenizer.from_str(json.dumps(skeleton))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    # The trained file must still carry the DeepSeek pipeline verbatim (src/tokenizer checks it).
    saved = json.loads(tok.to_str())
    for key in ("normalizer", "pre_tokenizer", "decoder"):
        if saved[key] != pipe[key]:
            log(f"WARNING: tokenizer {key} changed in training: {json.dumps(saved[key])[:300]}")
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"special token {s} got id {tok.token_to_id(s)}, expected {i}")
    return tok


def tokenizer_config_json():
    def added(content):
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False,
                "rstrip": False, "single_word": False}
    return {
        "add_bos_token": True, "add_eos_token": False,
        "bos_token": added(SPECIAL_TOKENS[BOS_ID]), "eos_token": added(SPECIAL_TOKENS[EOS_ID]),
        "pad_token": added(SPECIAL_TOKENS[EOS_ID]), "unk_token": None,
        "clean_up_tokenization_spaces": False, "model_max_length": 1048576,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def make_config():
    from transformers import DeepseekV4Config
    kw = dict(MODEL_CONFIG)
    kw["num_hidden_layers"] = len(kw["layer_types"])
    try:
        return DeepseekV4Config(**kw)
    except TypeError as e:
        log("config kwargs rejected:", e, "- retrying without torch_dtype/num_nextn_predict_layers")
        kw.pop("torch_dtype", None)
        kw.pop("num_nextn_predict_layers", None)
        return DeepseekV4Config(**kw)


class Instrumentation:
    """Forward hooks that collect what the two extra training signals need."""

    def __init__(self, model, cfg):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdl
        self.enabled = False
        self.router_indices = {}   # layer -> [N, k] expert ids of the last forward
        self.index_scores = {}     # layer -> [B, S, T] indexer scores (with grad)
        self.block_bias = {}       # layer -> [B, 1, S, T] 0 where the row was selected, else -inf
        self.attn_probs = {}       # layer -> [B, H, S, S+T] main attention probabilities
        self.csa_layers = []
        self.topk_layers = []
        self.handles = []
        for il, layer in enumerate(model.model.layers):
            gate = layer.mlp.gate
            if isinstance(gate, mdl.DeepseekV4TopKRouter):
                self.topk_layers.append(il)
                self.handles.append(gate.register_forward_hook(self._router_hook(il)))
            comp = layer.self_attn.compressor
            if isinstance(comp, mdl.DeepseekV4CSACompressor):
                self.csa_layers.append(il)
                # Detach the indexer's inputs: its KL loss must train the indexer only.
                self.handles.append(comp.indexer.register_forward_pre_hook(self._detach_inputs))
                self.handles.append(comp.indexer.scorer.register_forward_hook(self._store(self.index_scores, il)))
                self.handles.append(comp.register_forward_hook(self._store(self.block_bias, il, index=1)))
                self.handles.append(layer.self_attn.register_forward_hook(self._store(self.attn_probs, il, index=1)))

    def _router_hook(self, il):
        def hook(mod, args, out):
            if self.enabled:
                self.router_indices[il] = out[2].detach()
        return hook

    def _detach_inputs(self, mod, args):
        if not self.enabled:
            return None
        return tuple(a.detach() if hasattr(a, "detach") and getattr(a, "is_floating_point", lambda: False)() else a
                     for a in args)

    def _store(self, table, il, index=None):
        def hook(mod, args, out):
            if self.enabled:
                table[il] = out if index is None else out[index]
        return hook

    def clear(self):
        self.router_indices.clear()
        self.index_scores.clear()
        self.block_bias.clear()
        self.attn_probs.clear()

    def indexer_kl(self, torch):
        """Mean over CSA layers of KL(p_attn || softmax(indexer scores)) over the selected rows,
        p_attn = main attention mass on each selected compressed row, summed over heads."""
        losses = []
        for il in self.csa_layers:
            s = self.index_scores.get(il)
            bb = self.block_bias.get(il)
            a = self.attn_probs.get(il)
            if s is None or bb is None or a is None:
                continue
            T = s.shape[-1]
            if T == 0:
                continue
            sel = bb[:, 0] == 0                                    # [B, S, T]
            p = a[..., -T:].detach().float().sum(1) * sel          # [B, S, T]
            mass = p.sum(-1, keepdim=True)
            valid = (sel.any(-1)) & (mass[..., 0] > 0)
            if not valid.any():
                continue
            p = p / mass.clamp_min(1e-12)
            logq = torch.log_softmax(s.float().masked_fill(~sel, -1e9), dim=-1)
            logp = torch.log(p.clamp_min(1e-12))
            kl = torch.where(sel, p * (logp - logq), torch.zeros_like(p)).sum(-1)
            losses.append(kl[valid].mean())
        if not losses:
            return None
        return torch.stack(losses).mean()


def build_model(cfg, torch, seed, device):
    from transformers import DeepseekV4ForCausalLM
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg)
    try:
        model.config._attn_implementation = "eager"
    except Exception:
        pass
    model = model.float()
    # Hash routing (tid2eid): a fixed, seeded table of distinct experts per token and layer.
    g = torch.Generator().manual_seed(seed + 1)
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    with torch.no_grad():
        for layer in model.model.layers:
            gate = layer.mlp.gate
            if hasattr(gate, "tid2eid"):
                rows = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(cfg.vocab_size)])
                gate.tid2eid.copy_(rows.to(gate.tid2eid.dtype))
    return model.to(device)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        leaf = n.split(".")[-1]
        if p.dim() < 2 or "position_bias" in n or leaf in ("sinks", "base", "scale", "hc_base", "hc_scale"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def pack_parts(out_dir, members):
    """Writes a tar of {arcname: directory} as out_dir/hf.tar.part-aa, -ab, ... (15 MiB each),
    replacing earlier parts (what comes back from the device machine: <= 16 MiB a file)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for arc, d in members.items():
            tf.add(d, arcname=arc)
    data = buf.getvalue()
    chunk = 15 * 2**20
    for fn in os.listdir(out_dir):
        if fn.startswith("hf.tar.part-"):
            os.remove(os.path.join(out_dir, fn))
    for i in range(0, len(data), chunk):
        name = "hf.tar.part-" + "abcdefghij"[i // chunk // 10 % 10] + "abcdefghij"[i // chunk % 10]
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data[i:i + chunk])
    log(f"packed {len(data)} bytes into {math.ceil(len(data) / chunk)} part(s)")


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def windows(stream, seq, max_windows=None):
    """Non-overlapping evaluation windows: BOS + seq-1 tokens each."""
    out = []
    n = seq - 1
    for s in range(0, len(stream) - n, n):
        out.append([BOS_ID] + stream[s:s + n])
        if max_windows and len(out) >= max_windows:
            break
    return out


def eval_loss(model, torch, wins, device, batch, autocast):
    """Mean next-token cross-entropy (nats/token) over the windows (targets after BOS only)."""
    import torch.nn.functional as F
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(wins), batch):
            x = torch.tensor(wins[i:i + batch], device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=x, use_cache=False).logits
            l = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                reduction="sum")
            total += float(l)
            count += x[:, 1:].numel()
    return total / max(count, 1)


def main():
    global LOG_FILE
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=500.0, help="wall seconds for the whole script")
    ap.add_argument("--post-reserve", type=float, default=75.0, help="seconds kept after training")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--indexer-loss", type=float, default=1.0)
    ap.add_argument("--bias-gamma", type=float, default=1e-3)
    ap.add_argument("--max-epochs", type=float, default=20.0,
                    help="token budget in passes over the training split; the LR schedule ends at this "
                         "budget or at the time deadline, whichever comes first")
    ap.add_argument("--eval-every", type=float, default=15.0, help="seconds between validation evals")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--gen-tokens", type=int, default=120)
    ap.add_argument("--smoke", action="store_true", help="tiny evaluation sets and samples (pipeline test)")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    LOG_FILE = os.path.join(args.out, "train_log.txt")
    open(LOG_FILE, "w").close()
    deadline_all = T0 + args.budget
    train_deadline = deadline_all - args.post_reserve

    import torch
    import torch.nn.functional as F
    import transformers
    import tokenizers
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"python {sys.version.split()[0]}, device {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}")
    log(f"args: {vars(args)}")
    random.seed(args.seed)

    # --- corpus ---------------------------------------------------------------------------
    chapters = read_chapters(args.corpus)
    train_txt, val_txt, test_txt, test_books = split_corpus(chapters)
    nchar = lambda ts: sum(len(t) for t in ts)  # noqa: E731
    log(f"corpus {args.corpus}: {len(chapters)} chapters, {nchar(t for _, t in chapters)} chars; "
        f"train {len(train_txt)} ch / {nchar(train_txt)} chars, val {len(val_txt)} ch / {nchar(val_txt)} chars, "
        f"held-out test {len(test_txt)} ch / {nchar(test_txt)} chars = books {test_books}")

    # --- tokenizer ------------------------------------------------------------------------
    tok = train_tokenizer(train_txt, VOCAB_SIZE)
    vocab_n = tok.get_vocab_size(with_added_tokens=True)
    log(f"tokenizer: {vocab_n} tokens ({len(SPECIAL_TOKENS)} special), trained on the training split")
    if vocab_n != VOCAB_SIZE:
        log(f"note: vocabulary has {vocab_n} tokens; the model uses vocab_size {vocab_n}")
        MODEL_CONFIG["vocab_size"] = vocab_n

    def encode_all(texts):
        ids = []
        for e in tok.encode_batch(texts, add_special_tokens=False):
            ids.extend(e.ids)
        return ids
    train_ids, val_ids, test_ids = encode_all(train_txt), encode_all(val_txt), encode_all(test_txt)
    for t in train_txt[:3] + test_txt[-2:]:
        if tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=False) != t:
            log("WARNING: tokenizer round trip differs for a chapter")
    log(f"tokens: train {len(train_ids)} ({nchar(train_txt) / len(train_ids):.2f} chars/token), "
        f"val {len(val_ids)}, held-out {len(test_ids)}")

    # --- model ----------------------------------------------------------------------------
    cfg = make_config()
    model = build_model(cfg, torch, args.seed, device)
    n_params = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    n_active = n_params - n_expert + n_expert * k // E
    log(f"config: {json.dumps({k2: v for k2, v in MODEL_CONFIG.items()}, default=str)}")
    log(f"parameters: {n_params} total ({n_params * 4 / 2**20:.1f} MiB float32), {n_expert} in routed experts, "
        f"~{n_active} active per token")
    inst = Instrumentation(model, cfg)
    log(f"CSA layers {inst.csa_layers}, top-k routed layers {inst.topk_layers}")

    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=(device == "cuda"))
    val_wins = windows(val_ids, args.seq, 8 if args.smoke else 64)
    test_wins = windows(test_ids, args.seq, 8 if args.smoke else None)
    train_eval_wins = windows(train_ids[::1][: 64 * args.seq], args.seq, 8 if args.smoke else 64)

    t_train0 = time.time()
    train_span = max(train_deadline - t_train0, 1.0)
    step, tokens_seen = 0, 0
    ema = None
    best = {"val": float("inf"), "step": -1, "state": None}
    next_eval = t_train0 + args.eval_every
    curve = []
    L = args.seq
    N = len(train_ids)
    train_t = torch.tensor(train_ids, dtype=torch.long)
    log(f"training until t={train_deadline - T0:.0f}s ({train_span:.0f}s) or {args.max_epochs} epochs "
        f"({int(args.max_epochs * N)} tokens), batch {args.batch} x {L} tokens")

    def do_eval(final=False):
        v = eval_loss(model, torch, val_wins, device, 16, autocast=True)
        model.train()
        if v < best["val"]:
            best.update(val=v, step=step, state={n: t.detach().clone() for n, t in model.state_dict().items()})
        return v

    model.train()
    while True:
        now = time.time()
        frac = max((now - t_train0) / train_span, tokens_seen / (args.max_epochs * N))
        if frac >= 1.0 or (args.smoke and step >= 12):
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        starts = torch.randint(0, N - L, (args.batch,))
        x = torch.stack([train_t[s:s + L - 1] for s in starts.tolist()])
        x = torch.cat([torch.full((args.batch, 1), BOS_ID, dtype=torch.long), x], dim=1).to(device, non_blocking=True)
        inst.enabled = True
        inst.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(device == "cuda")):
            logits = model(input_ids=x, use_cache=False).logits
        lm_loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss = lm_loss
        idx_loss = None
        if args.indexer_loss > 0:
            try:
                idx_loss = inst.indexer_kl(torch)
            except Exception:
                log("indexer KL failed, disabling it:\n" + traceback.format_exc())
                args.indexer_loss = 0.0
            if idx_loss is not None:
                loss = loss + args.indexer_loss * idx_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # Auxiliary-loss-free balancing (DeepSeek V3): raise the bias of under-loaded experts.
        with torch.no_grad():
            for il in inst.topk_layers:
                ind = inst.router_indices.get(il)
                if ind is None:
                    continue
                load = torch.bincount(ind.reshape(-1), minlength=E).float()
                b = model.model.layers[il].mlp.gate.e_score_correction_bias
                b += args.bias_gamma * torch.sign(load.mean() - load)
        inst.enabled = False
        inst.clear()
        step += 1
        tokens_seen += x.numel()
        lv = lm_loss.item()
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        if step % 25 == 0 or step <= 3:
            el = time.time() - t_train0
            curve.append({"step": step, "t": round(el, 1), "loss_ema": round(ema, 4), "lr": lr})
            log(f"step {step:5d}  t {el:6.1f}s  loss {lv:.4f} (ema {ema:.4f})  "
                f"idx_kl {float(idx_loss) if idx_loss is not None else float('nan'):.4f}  "
                f"gnorm {float(gnorm):.2f}  lr {lr:.2e}  {tokens_seen / el:,.0f} tok/s  "
                f"epochs {tokens_seen / N:.2f}")
        if time.time() >= next_eval:
            v = do_eval()
            next_eval = time.time() + args.eval_every
            curve.append({"step": step, "t": round(time.time() - t_train0, 1), "val_loss": round(v, 4)})
            loads = []
            for il in inst.topk_layers:
                b = model.model.layers[il].mlp.gate.e_score_correction_bias
                loads.append(f"L{il} bias [{', '.join(f'{x:+.3f}' for x in b.tolist())}]")
            log(f"eval step {step}: val loss {v:.4f} (best {best['val']:.4f} at step {best['step']}); "
                + "; ".join(loads))

    train_seconds = time.time() - t_train0
    if device == "cuda":
        log(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    v = do_eval(final=True)
    log(f"training stopped after {step} steps, {train_seconds:.1f}s, {tokens_seen} tokens "
        f"({tokens_seen / N:.2f} epochs); last val loss {v:.4f}; best val {best['val']:.4f} at step {best['step']}")
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    model.float().eval()
    inst.enabled = False

    # --- save right away (what follows may run out of time) -------------------------------
    stage = os.path.join("/tmp", "ds4_demo_stage")
    hf_dir = os.path.join(stage, "hf")
    ref_dir = os.path.join(stage, "ref")
    os.makedirs(hf_dir, exist_ok=True)
    os.makedirs(ref_dir, exist_ok=True)
    model.cpu().save_pretrained(hf_dir, safe_serialization=True, max_shard_size="1GB")
    model.to(device)
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config_json(), f, ensure_ascii=False, indent=2)

    def pack():
        pack_parts(args.out, {"hf": hf_dir, "ref": ref_dir})

    summary = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "config": MODEL_CONFIG, "params_total": n_params, "params_routed_experts": n_expert,
        "params_active_approx": n_active, "vocab_size": vocab_n,
        "corpus": {"chapters": len(chapters), "train_tokens": len(train_ids), "val_tokens": len(val_ids),
                   "test_tokens": len(test_ids), "test_books": test_books},
        "train": {"steps": step, "seconds": round(train_seconds, 1), "tokens": tokens_seen,
                  "epochs": round(tokens_seen / N, 2), "batch": args.batch, "seq": L, "lr": args.lr,
                  "best_val_step": best["step"], "best_val_loss": best["val"], "curve": curve},
    }

    def write_summary():
        with open(os.path.join(ref_dir, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f, ensure_ascii=False, indent=1, default=str)

    write_summary()
    pack()

    # --- evaluation (float32, no autocast) -------------------------------------------------
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        t = time.time()
        test_loss = eval_loss(model, torch, test_wins, device, 8, autocast=False)
        val_loss = eval_loss(model, torch, val_wins, device, 8, autocast=False)
        tr_loss = eval_loss(model, torch, train_eval_wins, device, 8, autocast=False)
        summary["eval_float32"] = {"held_out_loss": test_loss, "held_out_ppl": math.exp(test_loss),
                                   "held_out_tokens": sum(len(w) - 1 for w in test_wins),
                                   "val_loss": val_loss, "train_sample_loss": tr_loss}
        log(f"float32 eval ({time.time() - t:.1f}s): held-out loss {test_loss:.4f} nats/token "
            f"(ppl {math.exp(test_loss):.2f}) over {summary['eval_float32']['held_out_tokens']} tokens of "
            f"{test_books}; val {val_loss:.4f}; train sample {tr_loss:.4f}")
    except Exception:
        log("evaluation failed:\n" + traceback.format_exc())

    # --- reference logits for the C++ engine ----------------------------------------------
    try:
        refs = {}
        short = [BOS_ID] + tok.encode("In the beginning God created the heaven and the earth. And the earth was",
                                      add_special_tokens=False).ids
        long_ = [BOS_ID] + test_ids[:299]
        for name, ids in (("short", short), ("long", long_)):
            with torch.no_grad():
                lg = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0].float().cpu()
            lg.contiguous().numpy().astype("<f4").tofile(os.path.join(ref_dir, f"logits_{name}.f32"))
            refs[name] = {"tokens": ids, "n_vocab": lg.shape[-1],
                          "argmax_last": int(lg[-1].argmax()), "logit_max_last": float(lg[-1].max())}
        # Greedy decode through the cache must agree with the prefill (sanity of the reference).
        with torch.no_grad():
            past = None
            rows = []
            for tpos, tid in enumerate(short):
                o = model(input_ids=torch.tensor([[tid]], device=device), past_key_values=past,
                          position_ids=torch.tensor([[tpos]], device=device), use_cache=True)
                past = o.past_key_values
                rows.append(o.logits[0, -1].float().cpu())
            dec = torch.stack(rows)
            pre = torch.from_numpy(__import__("numpy").fromfile(os.path.join(ref_dir, "logits_short.f32"),
                                                               dtype="<f4")).view(len(short), -1)
            refs["short"]["decode_vs_prefill_max_abs_diff"] = float((dec - pre).abs().max())
        with open(os.path.join(ref_dir, "tokens.json"), "w") as f:
            json.dump(refs, f)
        log(f"reference logits: short {len(short)} tokens (argmax last {refs['short']['argmax_last']} = "
            f"{tok.id_to_token(refs['short']['argmax_last'])!r}, decode vs prefill max |diff| "
            f"{refs['short']['decode_vs_prefill_max_abs_diff']:.2e}), long {len(long_)} tokens")
        checks = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in TOKENIZER_CHECK]
        with open(os.path.join(ref_dir, "tokenizer_check.json"), "w", encoding="utf-8") as f:
            json.dump(checks, f, ensure_ascii=False, indent=0)
    except Exception:
        log("reference logits failed:\n" + traceback.format_exc())
    write_summary()
    pack()

    # --- samples ---------------------------------------------------------------------------
    samples = []
    n_gen = 24 if args.smoke else args.gen_tokens
    for pi, prompt in enumerate(SAMPLE_PROMPTS[:1] if args.smoke else SAMPLE_PROMPTS):
        for mode in ("greedy", "sampled"):
            if time.time() > deadline_all - 8:
                log("out of time: skipping the remaining samples")
                break
            ids = [BOS_ID] + tok.encode(prompt, add_special_tokens=False).ids
            x = torch.tensor([ids], device=device)
            kw = dict(max_new_tokens=n_gen, do_sample=False) if mode == "greedy" else \
                dict(max_new_tokens=n_gen, do_sample=True, temperature=0.8, top_k=40, top_p=1.0)
            try:
                torch.manual_seed(pi)
                t = time.time()
                with torch.no_grad():
                    out = model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=EOS_ID,
                                         eos_token_id=EOS_ID, **kw)
                new = out[0, len(ids):].tolist()
                text = tok.decode(new, skip_special_tokens=False)
                samples.append({"prompt": prompt, "mode": mode, "settings": {k2: v for k2, v in kw.items()},
                                "seed": pi, "prompt_ids": ids, "ids": new, "text": text})
                log(f"--- {mode} sample ({len(new)} tokens, {time.time() - t:.1f}s), prompt {prompt!r}"
                    + (" (temperature 0.8, top-k 40, torch seed %d)" % pi if mode == "sampled" else "") +
                    f":\n{prompt}{text}\n---")
            except Exception:
                log(f"generate ({mode}) failed:\n" + traceback.format_exc())
    summary["samples"] = samples
    write_summary()
    pack()
    log(f"done at t={time.time() - T0:.1f}s")


if __name__ == "__main__":
    main()
