#!/usr/bin/env python3
"""How often a model served by ds4-server ends its turn by itself: starts ds4-server on a free
loopback port, sends /v1/chat/completions requests made by chat_data.py from the HELD-OUT books
(system prompts and tool schemas of every size the trainer uses, thinking on and off, multi-turn
history), each with max_tokens --max-tokens, and counts finish_reason "stop" (the model wrote
its end of sentence) against "length" (cut at the limit). Greedy (temperature 0) and the
server's default sampling (temperature 1, min-p 0.05, seeded per request).

No third-party packages. Usage:
  measure_turn_ends.py --server build/bin/ds4-server --model models/ds4-demo-chat.gguf \
      --corpus .demo-data/kjv.txt [-n 40] [--max-tokens 400] [--json OUT.json]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_data as CD  # noqa: E402
import train as T  # noqa: E402


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def requests_for(corpus, n, seed):
    """n (messages, tools, thinking, size class) requests from held-out-book conversations."""
    rng = random.Random(seed)
    _, _, test, _ = T.split_corpus(T.read_chapters(corpus))
    pool = CD.VersePool(CD.verses_of(test))
    profiles = CD.Profiles(rng)
    out = []
    # Same size classes as train_chat.py's buckets (system / tool text in tokens at ~2.2 chars/token).
    classes = [("short", 0, 380), ("long", 500, 3800), ("very long", 4000, 11000)]
    pattern = [0, 0, 1, 0, 1, 2]
    for i in range(n):
        name, lo, hi = classes[pattern[i % len(pattern)]]
        target = 0 if lo == 0 and rng.random() < 0.5 else rng.uniform(max(lo, 60), hi)
        prof = profiles.make(int(target * 2.2))
        conv = CD.make_conversation(pool, prof, rng, profiles)
        msgs = conv["messages"][:-1]
        out.append((msgs, conv["tools"], conv["thinking"], name))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("-n", type=int, default=36)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="write every request's outcome here")
    a = ap.parse_args()
    reqs = requests_for(a.corpus, a.n, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        srv = subprocess.Popen([a.server, "-m", a.model, "--port", "0", "--port-file", port_file, "-c", str(a.ctx),
                                "-t", str(a.threads), "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            t0 = time.time()
            while not os.path.exists(port_file) or not open(port_file).read().strip():
                if srv.poll() is not None or time.time() - t0 > 60:
                    raise SystemExit(f"ds4-server did not start: {srv.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{open(port_file).read().strip()}/v1/chat/completions"
            results = []
            for i, (msgs, tools, thinking, size) in enumerate(reqs):
                for mode in ("greedy", "sampled"):
                    body = {"model": "deepseek-v4-flash", "messages": msgs, "max_tokens": a.max_tokens,
                            "thinking": {"type": "enabled" if thinking else "disabled"}}
                    if tools:
                        body["tools"] = tools
                    if mode == "greedy":
                        body["temperature"] = 0
                    else:
                        body["seed"] = 1000 + i
                    t = time.time()
                    r = post(url, body)
                    ch = r["choices"][0]
                    res = {"i": i, "size": size, "thinking": thinking, "tools": bool(tools), "mode": mode,
                           "prompt_tokens": r["usage"]["prompt_tokens"],
                           "completion_tokens": r["usage"]["completion_tokens"],
                           "finish_reason": ch["finish_reason"], "seconds": round(time.time() - t, 2),
                           "request": msgs[-1]["content"][-120:], "content": (ch["message"].get("content") or "")[:400],
                           "reasoning": (ch["message"].get("reasoning_content") or "")[:200]}
                    results.append(res)
                    print(f"{i:3d} {mode:7s} {size:9s} think={int(thinking)} tools={int(bool(tools))} prompt "
                          f"{res['prompt_tokens']:5d} -> {res['completion_tokens']:3d} tokens, {res['finish_reason']}"
                          f"  ({res['request'][-50:]!r})", flush=True)
        finally:
            srv.terminate()
            srv.wait(timeout=30)
    print()
    for mode in ("greedy", "sampled"):
        for size in ("short", "long", "very long", None):
            g = [r for r in results if r["mode"] == mode and (size is None or r["size"] == size)]
            if not g:
                continue
            stop = sum(r["finish_reason"] == "stop" for r in g)
            toks = sorted(r["completion_tokens"] for r in g)
            print(f"{mode:7s} {size or 'all':9s}: ended its turn in {stop}/{len(g)} requests "
                  f"(prompts {min(r['prompt_tokens'] for r in g)}-{max(r['prompt_tokens'] for r in g)} tokens; "
                  f"reply tokens median {toks[len(toks) // 2]}, max {toks[-1]}; limit {a.max_tokens})")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
