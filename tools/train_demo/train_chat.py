#!/usr/bin/env python3
"""Trains the chat demo model, models/ds4-demo-chat.gguf: the demo model's architecture, config
and vocabulary (models/ds4-demo/tokenizer.json, not retrained), taught to answer in the
DeepSeek V4 chat format and to END its turns, so that coding agents pointed at ds4-server get
complete replies.

Runs on the GPU machine (scripts/device/train_demo_chat.sh) inside ONE wall-clock budget, as
train.py does (everything ends before --budget seconds after start). From random init.

  1. Conversations (chat_data.py; rendered by chat_render.py, which matches src/chat/renderer.cpp
     on the official encoder's fixtures): KJV verses as answers, with system prompts and tool
     schemas from nothing up to ~15k tokens, thinking and non-thinking turns, multi-turn history.
     Three row lengths (buckets): short (<= 512 tokens), long (<= 4096), very long (<= 12288),
     so that the end of a turn is learned after prompts nearly as long as the agents' (Codex
     ~12k, opencode ~14k tokens). (Eager attention keeps [S, S] scores per layer for the
     backward pass; 12288 needs ~90 GB. On out-of-memory the very long rows are cut to
     <= 8192 tokens, then dropped.) Answers come from the training books; validation (best checkpoint)
     from the validation chapters; held-out conversations from the held-out books.
  2. Tokenized exactly as ds4-server tokenizes a prompt: split at the control tokens, the text
     between them encoded without special-token parsing (checked against HF encode on the
     first conversations).
  3. Loss: next-token cross-entropy on what the assistant writes (reasoning, "</think>", the
     answer, the end-of-sentence token) and nothing else; some short rows are plain KJV text
     (full loss, weight --plain-weight) to keep the verses fluent. The indexer KL loss and the
     router bias balancing of train.py are kept.
  4. Saves the float32 HF checkpoint, tokenizer, reference logits of two chat prompts, and
     measures how often the model ends its turn: teacher-forced (argmax at the end-of-sentence
     position) and free generation with transformers (greedy, and sampled as ds4-server does by
     default: temperature 1, min-p 0.05) on held-out prompts.

Output (OUT_DIR; at most 8 files, 16 MiB each): train_log.txt and hf.tar.part-* (a tar of hf/
and ref/, as train.py). Reassemble with: cat hf.tar.part-* | tar -x -C DIR

Usage: python3 train_chat.py --corpus .demo-data/kjv.txt --out $OUT [--budget 235] [--smoke]
(--smoke: CPU, tiny data, a few steps of every bucket, the whole pipeline; a test of the script.)
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_data as CD  # noqa: E402
import chat_render as CR  # noqa: E402
import train as T  # noqa: E402

log = T.log
BOS_ID, EOS_ID = T.BOS_ID, T.EOS_ID

SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in sorted(T.SPECIAL_TOKENS, key=len, reverse=True)) + ")")


class Encoder:
    """ds4-server's prompt tokenization: control tokens by text, the text between them encoded
    with special-token parsing off. Plain fragments are cached (system prompts repeat)."""

    def __init__(self, tok):
        self.tok = tok
        self.sid = {s: i for i, s in enumerate(T.SPECIAL_TOKENS)}
        self.cache = {}

    def encode_convs(self, items):
        """items: [(text, [(b, e, trained)])] -> [(ids, mask)] (mask 1 on trained span tokens)."""
        split = []
        todo = set()
        for text, spans in items:
            parts, at = [], 0
            for k, p in enumerate(SPECIAL_RE.split(text)):
                if p:
                    parts.append((at, p, k % 2 == 1))
                    if k % 2 == 0 and p not in self.cache:
                        todo.add(p)
                at += len(p)
            split.append((parts, spans))
        todo = sorted(todo)
        for i in range(0, len(todo), 4096):
            chunk = todo[i:i + 4096]
            for s, e in zip(chunk, self.tok.encode_batch(chunk, add_special_tokens=False)):
                self.cache[s] = e.ids
        out = []
        for parts, spans in split:
            ids, mask = [], []
            for at, p, special in parts:
                inside = [ok for b, e, ok in spans if b <= at < e]
                if inside and not all(b <= at + len(p) <= e for b, e, _ in spans if b <= at < e):
                    raise SystemExit(f"fragment at char {at} crosses an assistant span boundary")
                m = 1 if inside and inside[0] else 0
                piece = [self.sid[p]] if special else self.cache[p]
                ids.extend(piece)
                mask.extend([m] * len(piece))
            out.append((ids, mask))
        return out


def gen_bucket(name, pool, profiles, rng, n_conv, n_prof, max_len, tok_range, cpt, enc, deadline):
    """n_conv conversations of at most max_len tokens over n_prof request profiles whose system /
    tool text targets tok_range tokens (0 = none or a short system line)."""
    profs = []
    for _ in range(n_prof):
        lo, hi = tok_range
        target = 0 if lo == 0 and rng.random() < 0.5 else rng.uniform(max(lo, 60), hi)
        profs.append(profiles.make(int(target * cpt)))
    items = []
    while len(items) < n_conv and time.time() < deadline:
        conv = CD.make_conversation(pool, rng.choice(profs), rng, profiles)
        items.append(CD.render_conversation(conv))
    encoded = enc.encode_convs(items)
    keep = [i for i, (ids, m) in enumerate(encoded) if len(ids) <= max_len and sum(m) > 0]
    n_made = len(items)
    rows, items = [encoded[i] for i in keep], [items[i] for i in keep]
    lens = sorted(len(r[0]) for r in rows) or [0]
    log(f"bucket {name}: {len(rows)}/{n_made} conversations fit {max_len} tokens; "
        f"tokens min {lens[0]} median {lens[len(lens) // 2]} max {lens[-1]}; "
        f"trained tokens {sum(sum(m) for _, m in rows)}")
    return rows, items


def collate(torch, rows):
    """Right-padded batch (EOS ids, weight 0) to the longest row rounded up to 64 tokens; causal
    attention keeps the padding invisible to the real tokens."""
    L = -(-max(len(r[0]) for r in rows) // 64) * 64
    x = torch.full((len(rows), L), EOS_ID, dtype=torch.long)
    w = torch.zeros((len(rows), L), dtype=torch.float32)
    for i, (ids, m) in enumerate(rows):
        x[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        w[i, :len(ids)] = torch.tensor(m, dtype=torch.float32)
    return x, w


def amp(torch, device, on):
    """bfloat16 autocast on the GPU; nothing on the CPU (smoke runs)."""
    import contextlib
    return torch.autocast("cuda", dtype=torch.bfloat16) if on and device == "cuda" else contextlib.nullcontext()


def masked_ce(F, logits, x, w):
    """Sum of weighted CE over targets x[:, 1:] (weights w[:, 1:]) and the weight sum."""
    ce = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                         reduction="none").view(x.shape[0], -1)
    ww = w[:, 1:]
    return (ce * ww).sum(), ww.sum()


def eval_rows(torch, F, model, rows, batch, device, autocast):
    """Masked loss (nats per trained token) and end-of-turn statistics over rows."""
    tot = cnt = 0.0
    eos_n = eos_top = 0
    eos_p = 0.0
    mid_n = mid_eos = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            x, w = collate(torch, rows[i:i + batch])
            x, w = x.to(device), w.to(device)
            with amp(torch, device, autocast):
                logits = model(input_ids=x, use_cache=False).logits
            s, n = masked_ce(F, logits, x, w)
            tot += float(s)
            cnt += float(n)
            lg = logits[:, :-1].float()
            tgt = x[:, 1:]
            sel = w[:, 1:] > 0
            top = lg.argmax(-1)
            at_eos = sel & (tgt == EOS_ID)
            eos_n += int(at_eos.sum())
            eos_top += int((at_eos & (top == EOS_ID)).sum())
            eos_p += float(torch.softmax(lg, -1)[..., EOS_ID][at_eos].sum())
            mid = sel & (tgt != EOS_ID)
            mid_n += int(mid.sum())
            mid_eos += int((mid & (top == EOS_ID)).sum())
    return {"loss": tot / max(cnt, 1), "tokens": int(cnt), "eos_positions": eos_n,
            "eos_argmax_rate": eos_top / max(eos_n, 1), "eos_mean_prob": eos_p / max(eos_n, 1),
            "early_eos_argmax_rate": mid_eos / max(mid_n, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "..", "models", "ds4-demo", "tokenizer.json"))
    ap.add_argument("--budget", type=float, default=235.0, help="wall seconds for the whole script")
    ap.add_argument("--post-reserve", type=float, default=60.0, help="seconds kept after training")
    ap.add_argument("--data-seconds", type=float, default=45.0, help="most seconds spent making data")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--indexer-loss", type=float, default=1.0)
    ap.add_argument("--bias-gamma", type=float, default=1e-3)
    ap.add_argument("--plain-frac", type=float, default=0.25, help="share of short rows that are plain KJV text")
    ap.add_argument("--plain-weight", type=float, default=0.3, help="loss weight of plain-text tokens")
    ap.add_argument("--schedule", default="SSMSSMX", help="bucket of each step, repeated (S short, M long, X very long)")
    ap.add_argument("--eval-every", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--gen-tokens", type=int, default=120)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny data and rows, a few steps (pipeline test)")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    T.LOG_FILE = os.path.join(args.out, "train_log.txt")
    open(T.LOG_FILE, "w").close()
    deadline_all = T.T0 + args.budget
    train_deadline = deadline_all - args.post_reserve

    import torch
    import torch.nn.functional as F
    import transformers
    import tokenizers
    from tokenizers import Tokenizer
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if args.smoke:
        torch.set_num_threads(min(8, os.cpu_count() or 1))
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"python {sys.version.split()[0]}, device {torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu'}")
    log(f"args: {vars(args)}")
    rng = random.Random(args.seed)

    # --- tokenizer: the demo model's, unchanged -------------------------------------------
    tok = Tokenizer.from_file(args.tokenizer)
    for i, s in enumerate(T.SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"{args.tokenizer}: special token {s} has id {tok.token_to_id(s)}, expected {i}")
    probe = tok.encode("<｜User｜>x<｜Assistant｜><think>y</think>z<｜end▁of▁sentence｜>", add_special_tokens=False).ids
    if probe[0] != 3 or EOS_ID not in probe or 5 not in probe or 6 not in probe:
        raise SystemExit(f"control tokens are not split out by the tokenizer: {probe}")
    vocab_n = tok.get_vocab_size(with_added_tokens=True)
    log(f"tokenizer {args.tokenizer}: {vocab_n} tokens; control tokens split out as ds4-server does")
    if vocab_n != T.MODEL_CONFIG["vocab_size"]:
        raise SystemExit(f"vocabulary {vocab_n} != model vocab_size {T.MODEL_CONFIG['vocab_size']}")
    enc = Encoder(tok)

    # --- data -------------------------------------------------------------------------------
    t_data = time.time()
    chapters = T.read_chapters(args.corpus)
    train_txt, val_txt, test_txt, test_books = T.split_corpus(chapters)
    pools = {"train": CD.VersePool(CD.verses_of(train_txt)), "val": CD.VersePool(CD.verses_of(val_txt)),
             "test": CD.VersePool(CD.verses_of(test_txt))}
    log(f"verses: train {len(pools['train'].flat)}, val {len(pools['val'].flat)}, held-out {len(pools['test'].flat)} "
        f"(books {test_books})")
    profiles = CD.Profiles(rng)
    sample = rng.sample(profiles.paras, min(300, len(profiles.paras)))
    n_tok = sum(len(e.ids) for e in tok.encode_batch(sample, add_special_tokens=False))
    cpt = sum(len(p) for p in sample) / max(n_tok, 1)
    log(f"system-prompt material: {len(profiles.paras)} stdlib docstring paragraphs, {len(profiles.funcs)} "
        f"function schemas; {cpt:.2f} chars/token")

    # n: conversations made for (train, validation, held-out); prof: request profiles for them.
    if args.smoke:
        spec = {"S": dict(L=256, rng=(0, 120), batch=4, n=(48, 16, 16), prof=(16, 8, 8)),
                "M": dict(L=1024, rng=(300, 800), batch=2, n=(8, 4, 4), prof=(4, 2, 2)),
                "X": dict(L=2048, rng=(1000, 1800), batch=1, n=(4, 2, 2), prof=(2, 1, 1))}
    else:
        spec = {"S": dict(L=512, rng=(0, 380), batch=32, n=(12000, 128, 256), prof=(400, 32, 64)),
                "M": dict(L=4096, rng=(500, 3800), batch=4, n=(800, 16, 32), prof=(160, 8, 16)),
                "X": dict(L=12288, rng=(4000, 11000), batch=1, n=(90, 4, 8), prof=(45, 4, 8))}
    data_deadline = time.time() + args.data_seconds
    train_rows, val_rows, test_rows = {}, {}, {}
    test_items = {}
    for b, sp in spec.items():
        train_rows[b], _ = gen_bucket(f"{b} train", pools["train"], profiles, rng, sp["n"][0], sp["prof"][0],
                                      sp["L"], sp["rng"], cpt, enc, data_deadline)
    for b, sp in spec.items():
        val_rows[b], _ = gen_bucket(f"{b} val", pools["val"], profiles, rng, sp["n"][1], sp["prof"][1],
                                    sp["L"], sp["rng"], cpt, enc, time.time() + 30)
        test_rows[b], test_items[b] = gen_bucket(f"{b} held-out", pools["test"], profiles, rng, sp["n"][2],
                                                 sp["prof"][2], sp["L"], sp["rng"], cpt, enc, time.time() + 30)
    # The fragment tokenization must equal HF's own encode of the whole text.
    for text, spans in test_items["S"][:20] + test_items["M"][:3]:
        ids, _ = enc.encode_convs([(text, spans)])[0]
        if ids != tok.encode(text, add_special_tokens=False).ids:
            raise SystemExit("fragment tokenization differs from HF encode on:\n" + text[:500])
    plain_ids = []
    for e in tok.encode_batch(train_txt, add_special_tokens=False):
        plain_ids.extend(e.ids)
    plain_t = torch.tensor(plain_ids, dtype=torch.long)
    log(f"data ready in {time.time() - t_data:.1f}s; plain KJV training tokens {len(plain_ids)}")
    for b in spec:
        if not train_rows[b]:
            raise SystemExit(f"bucket {b}: no training conversations")

    # --- model ------------------------------------------------------------------------------
    cfg = T.make_config()
    model = T.build_model(cfg, torch, args.seed, device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"config: {json.dumps(T.MODEL_CONFIG, default=str)}")
    log(f"parameters: {n_params} ({n_params * 4 / 2**20:.1f} MiB float32)")
    inst = T.Instrumentation(model, cfg)
    E = cfg.n_routed_experts
    opt = torch.optim.AdamW(T.param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=(device == "cuda"))

    def batch_of(b):
        sp = spec[b]
        rows = [train_rows[b][i] for i in torch.randint(0, len(train_rows[b]), (sp["batch"],)).tolist()]
        if b == "S" and args.plain_frac > 0:
            L = sp["L"]
            for i in range(len(rows)):
                if random.random() < args.plain_frac:
                    s = random.randrange(0, len(plain_ids) - L)
                    ids = [BOS_ID] + plain_ids[s:s + L - 1]
                    rows[i] = (ids, [0] + [args.plain_weight] * (L - 1))
        return collate(torch, rows)

    def val_score():
        res = {b: eval_rows(torch, F, model, val_rows[b], spec[b]["batch"], device, True) for b in spec if val_rows[b]}
        model.train()
        return sum(r["loss"] for r in res.values()) / len(res), res

    t_train0 = time.time()
    span_s = max(train_deadline - t_train0, 1.0)
    step = 0
    disabled = set()
    ema = {}
    best = {"val": float("inf"), "step": -1, "state": None}
    curve = []
    next_eval = t_train0 + args.eval_every
    random.seed(args.seed)
    log(f"training until t={train_deadline - T.T0:.0f}s ({span_s:.0f}s); schedule {args.schedule}; "
        + ", ".join(f"{b}: batch {sp['batch']} x <= {sp['L']}" for b, sp in spec.items()))
    model.train()
    sched = [c for c in args.schedule if c in spec]
    OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    while True:
        frac = (time.time() - t_train0) / span_s
        if frac >= 1.0 or (args.smoke and step >= 2 * len(sched)):
            break
        b = sched[step % len(sched)]
        if b in disabled:
            b = "S"
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, w = batch_of(b)
        x, w = x.to(device, non_blocking=True), w.to(device, non_blocking=True)
        inst.enabled = True
        inst.clear()
        try:
            with amp(torch, device, True):
                logits = model(input_ids=x, use_cache=False).logits
            s, n = masked_ce(F, logits, x, w)
            lm_loss = s / n.clamp_min(1.0)
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
        except OOM:
            shorter = [r for r in train_rows[b] if len(r[0]) <= 8192]
            if b == "X" and x.shape[1] > 8192 and shorter:
                log(f"out of memory on bucket {b} (rows {tuple(x.shape)}): keeping its {len(shorter)} rows of <= 8192 tokens")
                train_rows[b] = shorter
                val_rows[b] = [r for r in val_rows[b] if len(r[0]) <= 8192]
            else:
                log(f"out of memory on bucket {b} (rows {tuple(x.shape)}): bucket disabled")
                disabled.add(b)
            del x, w
            logits = loss = lm_loss = None
            opt.zero_grad(set_to_none=True)
            inst.enabled = False
            inst.clear()
            torch.cuda.empty_cache()
            continue
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for il in inst.topk_layers:
                ind = inst.router_indices.get(il)
                if ind is None:
                    continue
                load = torch.bincount(ind.reshape(-1), minlength=E).float()
                model.model.layers[il].mlp.gate.e_score_correction_bias.add_(args.bias_gamma * torch.sign(load.mean() - load))
        inst.enabled = False
        inst.clear()
        step += 1
        lv = float(lm_loss)
        ema[b] = lv if b not in ema else 0.9 * ema[b] + 0.1 * lv
        if step % 25 == 0 or step <= len(sched):
            el = time.time() - t_train0
            curve.append({"step": step, "t": round(el, 1), "bucket": b, "loss": round(lv, 4),
                          "ema": {k: round(v, 4) for k, v in ema.items()}, "lr": lr})
            log(f"step {step:5d}  t {el:6.1f}s  {b} {tuple(x.shape)}  loss {lv:.4f}  ema "
                + " ".join(f"{k} {v:.3f}" for k, v in ema.items())
                + f"  idx_kl {float(idx_loss) if idx_loss is not None else float('nan'):.4f}  gnorm {float(gnorm):.2f}"
                f"  lr {lr:.2e}")
        if time.time() >= next_eval or args.smoke and step == len(sched):
            v, res = val_score()
            if v < best["val"]:
                best.update(val=v, step=step, state={k: t.detach().clone() for k, t in model.state_dict().items()})
            next_eval = time.time() + args.eval_every
            curve.append({"step": step, "t": round(time.time() - t_train0, 1), "val": round(v, 4),
                          "val_eos_argmax": {k: round(r["eos_argmax_rate"], 3) for k, r in res.items()}})
            log(f"eval step {step}: val loss {v:.4f} (best {best['val']:.4f} at {best['step']}); "
                + "; ".join(f"{k}: loss {r['loss']:.3f} eos-argmax {r['eos_argmax_rate']:.3f} "
                            f"p(eos) {r['eos_mean_prob']:.3f} early-eos {r['early_eos_argmax_rate']:.4f}"
                            for k, r in res.items()))

    train_seconds = time.time() - t_train0
    if device == "cuda":
        log(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    v, res = val_score()
    if v < best["val"]:
        best.update(val=v, step=step, state=None)
    log(f"training stopped after {step} steps, {train_seconds:.1f}s; last val {v:.4f}; best val {best['val']:.4f} "
        f"at step {best['step']}; disabled buckets {sorted(disabled)}")
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    model.float().eval()
    inst.enabled = False

    # --- save right away --------------------------------------------------------------------
    stage = "/tmp/ds4_demo_chat_stage" + ("_smoke" if args.smoke else "")
    hf_dir, ref_dir = os.path.join(stage, "hf"), os.path.join(stage, "ref")
    __import__("shutil").rmtree(stage, ignore_errors=True)
    os.makedirs(hf_dir, exist_ok=True)
    os.makedirs(ref_dir, exist_ok=True)
    model.cpu().save_pretrained(hf_dir, safe_serialization=True, max_shard_size="1GB")
    model.to(device)
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(T.tokenizer_config_json(), f, ensure_ascii=False, indent=2)
    summary = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "args": vars(args),
        "config": T.MODEL_CONFIG, "params_total": n_params, "tokenizer": "models/ds4-demo/tokenizer.json",
        "data": {b: {"train_rows": len(train_rows[b]), "val_rows": len(val_rows[b]), "held_out_rows": len(test_rows[b]),
                     "max_len": spec[b]["L"], "train_trained_tokens": sum(sum(m) for _, m in train_rows[b])}
                 for b in spec},
        "test_books": test_books,
        "train": {"steps": step, "seconds": round(train_seconds, 1), "best_val_step": best["step"],
                  "best_val": best["val"], "disabled_buckets": sorted(disabled), "curve": curve},
    }

    def write_summary():
        with open(os.path.join(ref_dir, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f, ensure_ascii=False, indent=1, default=str)

    def pack():
        write_summary()
        T.pack_parts(args.out, {"hf": hf_dir, "ref": ref_dir})

    pack()

    # --- float32 evaluation on held-out conversations --------------------------------------
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        t = time.time()
        ev = {b: eval_rows(torch, F, model, test_rows[b], spec[b]["batch"], device, False) for b in spec if test_rows[b]}
        summary["held_out_float32"] = ev
        for b, r in ev.items():
            log(f"held-out {b} (float32, {len(test_rows[b])} conversations, {r['tokens']} trained tokens): loss "
                f"{r['loss']:.4f} nats/token; end of turn: argmax EOS at {r['eos_argmax_rate'] * 100:.1f}% of "
                f"{r['eos_positions']} turn ends, mean p(EOS) {r['eos_mean_prob']:.3f}; argmax EOS too early at "
                f"{r['early_eos_argmax_rate'] * 100:.2f}% of other answer positions")
        log(f"float32 eval took {time.time() - t:.1f}s")
    except Exception:
        log("evaluation failed:\n" + traceback.format_exc())

    # --- reference logits for the C++ engine ------------------------------------------------
    try:
        refs = {}
        short_text = CR.render([{"role": "system", "content": "You are a helpful assistant."},
                                {"role": "user", "content": "Tell me about the sea."}], None, thinking=True)[0]
        short = tok.encode(short_text, add_special_tokens=False).ids
        long_pick = [it for it in test_items["M"] + test_items["S"]
                     if len(tok.encode(it[0], add_special_tokens=False).ids) <= (600 if args.smoke else 1800)]
        long_pick.sort(key=lambda it: -len(it[0]))
        long_ = tok.encode(long_pick[0][0], add_special_tokens=False).ids
        for name, ids in (("short", short), ("long", long_)):
            with torch.no_grad():
                lg = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0].float().cpu()
            entry = {"tokens": ids, "n_vocab": lg.shape[-1], "argmax_last": int(lg[-1].argmax())}
            if name == "long":
                rows = sorted(set(list(range(0, len(ids), 8)) + list(range(max(0, len(ids) - 40), len(ids)))))
                lg = lg[rows]
                entry.update(rows=rows, logits_file="logits_long_rows.f32")
            lg.contiguous().numpy().astype("<f4").tofile(os.path.join(ref_dir, entry.get("logits_file", f"logits_{name}.f32")))
            refs[name] = entry
        with open(os.path.join(ref_dir, "tokens.json"), "w") as f:
            json.dump(refs, f)
        checks = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids}
                  for s in T.TOKENIZER_CHECK + [short_text]]
        with open(os.path.join(ref_dir, "tokenizer_check.json"), "w", encoding="utf-8") as f:
            json.dump(checks, f, ensure_ascii=False, indent=0)
        log(f"reference logits: short {len(short)} tokens (argmax last {refs['short']['argmax_last']} = "
            f"{tok.id_to_token(refs['short']['argmax_last'])!r}), long {len(long_)} tokens ({len(refs['long']['rows'])} rows)")
    except Exception:
        log("reference logits failed:\n" + traceback.format_exc())
    pack()

    # --- free generation: does it end its turn? ---------------------------------------------
    gens = []
    order = [x for i in range(8) for x in (("S", 2 * i), ("M", i), ("X", i), ("S", 2 * i + 1))]  # while time lasts
    n_gen = 24 if args.smoke else args.gen_tokens
    for gi, (b, i) in enumerate(order[:4] if args.smoke else order):
        if i >= len(test_items[b]):
            continue
        prompt = test_items[b][i][0]
        spans = test_items[b][i][1]
        prompt = prompt[:spans[-1][0]]  # up to and including the generation prompt
        ids = tok.encode(prompt, add_special_tokens=False).ids
        for mode in ("greedy", "sampled"):
            if time.time() > deadline_all - 6:
                break
            kw = dict(max_new_tokens=n_gen, do_sample=False) if mode == "greedy" else \
                dict(max_new_tokens=n_gen, do_sample=True, temperature=1.0, min_p=0.05, top_k=0, top_p=1.0)
            try:
                torch.manual_seed(gi)
                x = torch.tensor([ids], device=device)
                t = time.time()
                with torch.no_grad():
                    out = model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=EOS_ID,
                                         eos_token_id=EOS_ID, **kw)
                new = out[0, len(ids):].tolist()
                ended = EOS_ID in new
                gens.append({"bucket": b, "mode": mode, "prompt_tokens": len(ids), "ended": ended,
                             "new_tokens": new.index(EOS_ID) + 1 if ended else len(new),
                             "text": tok.decode(new, skip_special_tokens=False)})
                log(f"--- {b} {mode} ({len(ids)}-token prompt, {time.time() - t:.1f}s): "
                    f"{'ENDED' if ended else 'NOT ENDED'} after {gens[-1]['new_tokens']} tokens; request "
                    f"{prompt[-160:]!r}\n{gens[-1]['text']}\n---")
            except Exception:
                log(f"generate failed:\n" + traceback.format_exc())
    for mode in ("greedy", "sampled"):
        g = [x for x in gens if x["mode"] == mode]
        if g:
            log(f"free generation ({mode}): ended its turn in {sum(x['ended'] for x in g)}/{len(g)} held-out prompts "
                f"within {n_gen} tokens")
    summary["generation"] = gens
    pack()
    log(f"done at t={time.time() - T.T0:.1f}s")


if __name__ == "__main__":
    main()
