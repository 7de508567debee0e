#!/usr/bin/env python3
"""Chat conversations for the chat demo model (train_chat.py): KJV verses as answers, rendered in
the DeepSeek V4 format exactly as ds4-server renders requests (chat_render.py).

What a conversation looks like (all random, seeded):
  * a "profile": no system text, a short one, or a long agent-like one (markdown sections whose
    paragraphs are English docstrings of the Python standard library, so that technical English
    of several thousand tokens precedes the request, as with coding agents), with or without
    tool schemas (made from stdlib function signatures, plus agent-style tools such as Write or
    exec_command), sometimes as a developer message, sometimes with a system turn after the first
    user message (Claude Code does that);
  * user turns: a request (recite a reference, a verse range, "Tell me about the sea.", the
    beginning of a verse, or anything else: greetings, coding tasks, questions), sometimes
    wrapped in context blocks (<environment_context>, <system-reminder>) or split over several
    user messages;
  * assistant turns: thinking ("<think>" short reasoning "</think>" answer) or not ("</think>"
    answer); the answer is 1-3 verses, one per line, then the end of sentence. Earlier turns of
    multi-turn conversations are rendered as the renderer renders history (reasoning dropped
    unless tools are present); a few conversations carry a tool call and its result in the
    history (that call is context only: it gets no loss, the model is not taught to call tools).

Verses come from one split of the corpus (train / validation / held-out books), so the held-out
conversations answer with verses the model never saw. No third-party packages here; train_chat.py
tokenizes. `python3 chat_data.py --corpus .demo-data/kjv.txt` prints samples.
"""
import argparse
import inspect
import json
import random
import re
import sys
import warnings

import chat_render as cr

STOP = set("""a an and are as at be but by for from had hath have he her him his i in is it its
me my not of on or our shall she so that the thee their them then there they thou thy to unto up
upon us was we were which who will with ye you your all also any came come did do even every go
hast into let made make may more no now one out said saith say should than this thus shalt what
when whom yea these those been before after against because over under behind him himself""".split())

TOPICS = """sea light water earth heaven king lord land fire bread wine river mountain city gate
house temple altar sword bow horse sheep lamb shepherd field tree fig vine seed harvest rain cloud
wind storm star sun moon night day morning evening law covenant prophet priest servant children
father mother brother sister son daughter wife husband friend enemy war peace love fear hope joy
sorrow death life blood bone heart soul spirit wisdom knowledge truth mercy grace sin iniquity
judgment righteousness glory power strength honour gold silver brass iron stone wood oil honey
milk salt garment linen wilderness desert valley fountain well ship fish net nation people
tribe stranger widow poor rich praise prayer song voice word name face hand eye mouth tongue ear
feet door wall tower throne crown kingdom""".split()

REFUSALS = [
    "I know only the words of the King James Bible, so I answer with a verse.",
    "This is not in the Bible I know. I will answer with a verse.",
    "I can only recite scripture. I will recite a verse.",
]

OTHER_REQUESTS = [
    "hi", "Hello!", "Hello, who are you?", "What can you do?", "Thanks.", "Are you there?",
    "What is 2 + 2?", "What is the capital of France?", "What time is it?", "Explain recursion.",
    "Write a poem.", "Tell me a joke.", "Summarize this repository.", "Fix the failing test.",
    "Write hello.txt with the text hello.", "Create a file named notes.md.", "List the files here.",
    "Run the tests and tell me what fails.", "Refactor src/main.c.", "Why does the build fail?",
    "Add a README.", "What does this function do?", "Review my last commit.", "Rename foo to bar.",
    "Generate a title for this conversation.", "Summarize the conversation above in one line.",
    "Write a Python script that prints the primes below 100.", "How do I center a div?",
    "Translate 'good morning' into French.", "Count the lines of code in this project.",
    "Say something.", "Continue.", "Go on.", "ok", "Please answer briefly.", "Test.",
]

FILES = ["main.c", "README.md", "src/app.py", "lib/util.js", "hello.txt", "Makefile", "notes.md",
         "tests/test_main.py", "go.mod", "Cargo.toml", "index.html", "setup.cfg"]

REF_TEMPLATES = ["Recite {ref}.", "Quote {ref}.", "What does {ref} say?", "{ref}", "Read me {ref}.",
                 "Please recite {ref}", "recite {ref}", "What is written in {ref}?", "Give me {ref}."]
RANGE_TEMPLATES = ["Recite {ref}.", "Quote {ref}.", "Read {ref}.", "{ref}", "Give me {ref}, please."]
TOPIC_TEMPLATES = ["Tell me about {t}.", "Tell me about the {t}.", "What does the Bible say about {t}?",
                   "Speak of {t}.", "Tell me something about {t}", "A verse about {t}, please.",
                   "What is said of the {t}?", "{t}", "Tell me about {t}s.", "I want to hear about {t}."]
CONT_TEMPLATES = ["Continue: {f}", "{f}", "{f}...", "Finish this verse: {f}", "Complete: \"{f}\""]

SHORT_SYSTEMS = [
    "You are a helpful assistant.", "You are a coding agent. Use the tools to do what the user asks.",
    "You are a helpful assistant. Answer briefly.", "You are DwarfStar, a local assistant.",
    "Answer the user's questions.", "You are a title generator. You output ONLY a thread title.",
    "You are an expert software engineer.", "Be concise.",
    "You are Claude Code, Anthropic's official CLI for Claude.",
    "You are a coding agent running in the Codex CLI, a terminal-based coding assistant.",
    "You are opencode, an interactive CLI tool that helps users with software engineering tasks.",
    "You are an expert coding assistant operating inside pi, a coding agent harness.",
]

SECTION_TITLES = ["Tone and style", "Doing tasks", "Tool usage policy", "Code references",
                  "Following conventions", "Task management", "Proactiveness", "Git workflow",
                  "Planning", "Sandbox and approvals", "Presenting your work", "Editing constraints",
                  "Security", "Testing", "Formatting", "Environment", "Notes", "Guidelines"]

STDLIB = """argparse subprocess json re os pathlib collections itertools functools typing datetime
logging unittest asyncio http.client urllib.request urllib.parse csv sqlite3 shutil tempfile
threading multiprocessing socket hashlib random statistics decimal fractions textwrap string
inspect dataclasses enum contextlib abc io zipfile tarfile gzip pickle copy pprint traceback
warnings weakref heapq bisect array struct codecs locale gettext calendar time glob fnmatch difflib
html xml.etree.ElementTree configparser uuid base64 binascii platform signal selectors queue
sched secrets hmac math operator numbers getopt shlex doctest timeit tokenize ast dis importlib
pkgutil zipimport mimetypes ipaddress socketserver http.server email.message smtplib ftplib
mailbox plistlib netrc graphlib sys builtins""".split()

AGENT_TOOLS = [
    ("Write", {"file_path": "string", "content": "string"}, ["file_path", "content"]),
    ("Read", {"file_path": "string", "offset": "integer", "limit": "integer"}, ["file_path"]),
    ("Edit", {"file_path": "string", "old_string": "string", "new_string": "string", "replace_all": "boolean"},
     ["file_path", "old_string", "new_string"]),
    ("Bash", {"command": "string", "timeout": "integer", "description": "string"}, ["command"]),
    ("Glob", {"pattern": "string", "path": "string"}, ["pattern"]),
    ("Grep", {"pattern": "string", "path": "string", "glob": "string"}, ["pattern"]),
    ("exec_command", {"cmd": "string", "workdir": "string", "yield_time_ms": "integer"}, ["cmd"]),
    ("apply_patch", {"input": "string"}, ["input"]),
    ("update_plan", {"explanation": "string", "plan": "array"}, ["plan"]),
    ("write", {"path": "string", "content": "string"}, ["path", "content"]),
    ("read", {"path": "string", "offset": "number", "limit": "number"}, ["path"]),
    ("bash", {"command": "string", "timeout": "number"}, ["command"]),
    ("edit", {"filePath": "string", "oldString": "string", "newString": "string"}, ["filePath", "oldString", "newString"]),
    ("todowrite", {"todos": "array"}, ["todos"]),
    ("webfetch", {"url": "string", "format": "string"}, ["url"]),
]


# ----------------------------------------------------------------------------------------------
# Verses
# ----------------------------------------------------------------------------------------------

def verses_of(chapter_texts):
    """[(book, chapter, [verse, ...])] from train.py's chapter texts ('Book N\\n\\nv1\\nv2\\n\\n')."""
    out = []
    for t in chapter_texts:
        head, body = t.split("\n\n", 1)
        book, num = head.rsplit(" ", 1)
        vs = [v for v in body.strip("\n").split("\n") if v]
        out.append((book, int(num), vs))
    return out


class VersePool:
    def __init__(self, chapters):
        self.chapters = chapters
        self.flat = [(ci, vi) for ci, (_, _, vs) in enumerate(chapters) for vi in range(len(vs))]
        self.by_word = {}
        for ci, vi in self.flat:
            for w in set(re.findall(r"[a-z]+", self.chapters[ci][2][vi].lower())):
                self.by_word.setdefault(w, []).append((ci, vi))
        self.topics = [t for t in TOPICS if len(self.by_word.get(t, [])) >= 3]

    def text(self, ci, vi):
        return self.chapters[ci][2][vi]

    def ref(self, ci, vi, vj=None):
        book, num, _ = self.chapters[ci]
        return f"{book} {num}:{vi + 1}" + (f"-{vj + 1}" if vj is not None and vj != vi else "")

    def run(self, rng, ci, vi, n):
        """Up to n consecutive verses from (ci, vi), within the chapter."""
        vs = self.chapters[ci][2]
        return [(ci, k) for k in range(vi, min(vi + n, len(vs)))]


def n_verses(rng):
    return rng.choices([1, 2, 3], weights=[5, 3, 2])[0]


def make_request(pool, rng):
    """(user text, reasoning, answer text)."""
    kind = rng.choices(["ref", "range", "topic", "word", "cont", "other"], weights=[20, 8, 25, 12, 15, 20])[0]
    if kind in ("ref", "range"):
        ci, vi = rng.choice(pool.flat)
        if kind == "ref":
            got = pool.run(rng, ci, vi, 1)
            ref = pool.ref(ci, vi)
            user = rng.choice(REF_TEMPLATES).format(ref=ref)
        else:
            got = pool.run(rng, ci, vi, rng.choice([2, 3]))
            ref = pool.ref(ci, vi, got[-1][1])
            user = rng.choice(RANGE_TEMPLATES).format(ref=ref)
        reasoning = rng.choice([f"The user asks for {ref}. I will recite it.", f"{ref}. I recite it.",
                                f"The user wants {ref}."])
    elif kind in ("topic", "word"):
        if kind == "topic":
            t = rng.choice(pool.topics)
        else:  # any content word of some verse: generalizes "about X" to words outside TOPICS
            ci, vi = rng.choice(pool.flat)
            words = [w for w in re.findall(r"[a-z]+", pool.text(ci, vi).lower()) if len(w) > 3 and w not in STOP]
            t = rng.choice(words) if words else rng.choice(pool.topics)
        hits = pool.by_word.get(t) or pool.by_word[rng.choice(pool.topics)]
        picks = sorted(set(rng.sample(hits, min(len(hits), n_verses(rng)))))
        got = picks
        user = rng.choice(TOPIC_TEMPLATES).format(t=t)
        if rng.random() < 0.3:
            user = user.capitalize()
        reasoning = rng.choice([f"The user asks about {t}. I will recite a verse that speaks of {t}.",
                                f"The user wants to hear about {t}. A verse about {t}.",
                                f"About {t}. I recite what is written of {t}."])
    elif kind == "cont":
        ci, vi = rng.choice(pool.flat)
        words = pool.text(ci, vi).split()
        if len(words) < 4:
            words = pool.text(*pool.flat[0]).split()
            ci, vi = pool.flat[0]
        k = rng.randint(2, max(2, min(8, len(words) - 2)))
        user = rng.choice(CONT_TEMPLATES).format(f=" ".join(words[:k]))
        got = pool.run(rng, ci, vi, 1)
        reasoning = rng.choice(["The user gives the beginning of a verse. I will complete it.",
                                "A verse begins so. I complete it."])
    else:
        user = rng.choice(OTHER_REQUESTS)
        if "{" not in user and rng.random() < 0.15:
            user = user.replace("this project", rng.choice(FILES))
        ci, vi = rng.choice(pool.flat)
        got = pool.run(rng, ci, vi, n_verses(rng))
        reasoning = rng.choice(REFUSALS)
    answer = "\n".join(pool.text(c, v) for c, v in got)
    return user, reasoning, answer


# ----------------------------------------------------------------------------------------------
# English of the Python standard library, for long system prompts and tool schemas
# ----------------------------------------------------------------------------------------------

def stdlib_material():
    """(paragraphs, functions): docstring paragraphs (mostly ASCII English, >= 60 chars) and
    [(tool name, description, {param: json type}, required)] from stdlib signatures."""
    import importlib
    paras, funcs = [], []
    seen = set()
    warnings.simplefilter("ignore")
    for name in STDLIB:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001
            continue
        objs = [("", mod)] + sorted((k, v) for k, v in vars(mod).items() if not k.startswith("_"))
        for k, obj in objs:
            if k and getattr(obj, "__module__", None) not in (mod.__name__, None):
                continue
            try:
                doc = inspect.getdoc(obj)
            except Exception:  # noqa: BLE001
                doc = None
            if not doc:
                continue
            for p in re.split(r"\n\s*\n", doc):
                p = p.strip()
                if len(p) >= 60 and p not in seen and sum(c > "\x7e" for c in p) == 0:
                    seen.add(p)
                    paras.append(p)
            if k and callable(obj) and inspect.isfunction(obj):
                try:
                    sig = inspect.signature(obj)
                except (TypeError, ValueError):
                    continue
                props, req = {}, []
                for pn, prm in sig.parameters.items():
                    if prm.kind in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD):
                        continue
                    d = prm.default
                    ty = ("boolean" if isinstance(d, bool) else "integer" if isinstance(d, int) else
                          "number" if isinstance(d, float) else "array" if isinstance(d, (list, tuple)) else "string")
                    props[pn] = ty
                    if d is prm.empty:
                        req.append(pn)
                desc = re.split(r"\n\s*\n", doc)[0].replace("\n", " ")[:300]
                funcs.append((f"{name.replace('.', '_')}_{k}", desc, props, req))
    return paras, funcs


def schema(name, desc, props, req, rng, paras):
    p = {}
    for k, ty in props.items():
        d = {"type": ty}
        if ty == "array":
            d["items"] = {"type": "string"}
        if rng.random() < 0.7:
            d["description"] = rng.choice([f"The {k} argument.", f"The {k.replace('_', ' ')} to use.",
                                           rng.choice(paras)[:160].replace("\n", " ")])
        p[k] = d
    fn = {"name": name, "description": desc, "parameters": {"type": "object", "properties": p, "required": req}}
    if rng.random() < 0.3:
        fn["parameters"]["additionalProperties"] = False
    return {"type": "function", "function": fn}


class Profiles:
    """Request shapes: system text, developer text, tools. Lengths are counted in characters
    here; train_chat.py measures tokens and picks what fits a row."""

    def __init__(self, rng):
        self.paras, self.funcs = stdlib_material()
        self.rng = rng

    def long_text(self, chars):
        rng = self.rng
        out = [rng.choice(SHORT_SYSTEMS)]
        n = len(out[0])
        while n < chars:
            title = rng.choice(SECTION_TITLES)
            sec = [f"{'#' * rng.choice([1, 2, 3])} {title}"]
            for _ in range(rng.randint(1, 5)):
                p = rng.choice(self.paras)
                if rng.random() < 0.3:
                    p = "\n".join("- " + s.strip() for s in re.split(r"(?<=\.)\s+", p) if s.strip())
                sec.append(p)
            s = "\n\n".join(sec)
            out.append(s)
            n += len(s) + 2
        return "\n\n".join(out)[: max(chars, 40)]

    def tools(self, n):
        rng = self.rng
        tools = []
        agent = rng.sample(AGENT_TOOLS, min(len(AGENT_TOOLS), rng.randint(1, 6)))
        for name, props, req in agent:
            tools.append(schema(name, rng.choice(self.paras)[:400].replace("\n", " "), props, req, rng, self.paras))
        for f in rng.sample(self.funcs, min(len(self.funcs), max(0, n - len(tools)))):
            tools.append(schema(*f, rng, self.paras))
        rng.shuffle(tools)
        return tools[:max(n, 1)]

    def make(self, target_chars):
        """A profile with roughly target_chars of system / developer / tool text."""
        rng = self.rng
        prof = {"system": None, "developer": None, "tools": None, "mid_system": None, "context": False}
        if target_chars <= 0:
            if rng.random() < 0.5:
                prof["system"] = rng.choice(SHORT_SYSTEMS)
            return prof
        use_tools = rng.random() < 0.6 and target_chars > 1200  # the tools section alone is ~300 tokens
        tool_chars = int(target_chars * rng.uniform(0.2, 0.7)) if use_tools else 0
        if use_tools:
            tools, n = [], 0
            while (n < tool_chars or not tools) and len(tools) < 60:
                for t in self.tools(rng.randint(1, 4)):
                    size = len(json.dumps(t))
                    if tools and n + size > tool_chars:
                        break
                    tools.append(t)
                    n += size
                else:
                    continue
                break
            prof["tools"] = tools
        rest = max(target_chars - tool_chars, 40)
        if rng.random() < 0.2:  # pi / Codex style: the instructions as a developer message
            prof["system"] = rng.choice(SHORT_SYSTEMS) if rng.random() < 0.5 else None
            prof["developer"] = self.long_text(rest)
        else:
            prof["system"] = self.long_text(rest)
        if rng.random() < 0.25:  # Claude Code style: a system turn after the first user message
            prof["mid_system"] = self.env_block()
        prof["context"] = rng.random() < 0.4
        return prof

    def env_block(self):
        rng = self.rng
        cwd = rng.choice(["/tmp/ds4-work", "/home/user/project", "/root/src/app", "/work/repo"])
        kind = rng.randint(0, 2)
        if kind == 0:
            return ("<environment_context>\n  <cwd>" + cwd + "</cwd>\n  <approval_policy>never</approval_policy>\n"
                    "  <sandbox_mode>danger-full-access</sandbox_mode>\n  <network_access>enabled</network_access>\n"
                    "  <shell>bash</shell>\n</environment_context>")
        if kind == 1:
            return ("<system-reminder>\n" + rng.choice(self.paras) + "\n</system-reminder>")
        return (f"<env>\nWorking directory: {cwd}\nIs directory a git repo: {rng.choice(['Yes', 'No'])}\n"
                f"Platform: linux\nToday's date: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}\n</env>")


def make_conversation(pool, prof, rng, profiles, thinking=None):
    """Returns a dict: messages, tools, thinking, and loss_ok (per assistant message: whether
    its output is trained on)."""
    if thinking is None:
        thinking = rng.random() < 0.6
    msgs = []
    if prof["system"] is not None:
        msgs.append({"role": "system", "content": prof["system"]})
    if prof["developer"] is not None:
        msgs.append({"role": "developer", "content": prof["developer"]})
    n_turns = rng.choices([1, 2, 3], weights=[70, 20, 10])[0]
    loss_ok = []
    tools = prof["tools"]
    for turn in range(n_turns):
        user, reasoning, answer = make_request(pool, rng)
        if turn == 0 and prof["context"]:
            block = profiles.env_block()
            if rng.random() < 0.5:
                msgs.append({"role": "user", "content": block})
                msgs.append({"role": "user", "content": user})
            else:
                msgs.append({"role": "user", "content": block + "\n" + user if rng.random() < 0.7 else user + "\n\n" + block})
        else:
            msgs.append({"role": "user", "content": user})
        if turn == 0 and prof["mid_system"]:
            msgs.append({"role": "system", "content": prof["mid_system"]})
        if tools and rng.random() < 0.12:
            # History with one tool call and its result; the call itself gets no loss.
            t = rng.choice(tools)["function"]
            args = {k: (rng.choice(FILES) if v["type"] == "string" else 1 if v["type"] in ("integer", "number")
                        else True if v["type"] == "boolean" else ["a"]) for k, v in t["parameters"]["properties"].items()}
            cid = f"call_{rng.randrange(10**8)}"
            msgs.append({"role": "assistant", "content": "", "reasoning_content": "I will use a tool.",
                         "tool_calls": [{"id": cid, "type": "function",
                                         "function": {"name": t["name"], "arguments": json.dumps(args)}}]})
            loss_ok.append(False)
            msgs.append({"role": "tool", "tool_call_id": cid,
                         "content": rng.choice(["File created successfully.", "OK", "WROTE-OK",
                                                rng.choice(profiles.paras)[:300]])})
        msgs.append({"role": "assistant", "content": answer, "reasoning_content": reasoning})
        loss_ok.append(True)
    return {"messages": msgs, "tools": tools, "thinking": thinking, "loss_ok": loss_ok}


def render_conversation(conv):
    """(text, [(begin, end, trained)]) with the last assistant message's generation prompt."""
    text, spans = cr.render(conv["messages"], conv["tools"], thinking=conv["thinking"], drop_thinking=True)
    assert len(spans) == len(conv["loss_ok"]), (len(spans), len(conv["loss_ok"]))
    return text, [(b, e, ok) for (b, e), ok in zip(spans, conv["loss_ok"])]


def prompt_of(conv):
    """The request a client would send for the conversation's last answer: everything before
    the last assistant message, rendered with its generation prompt; and that answer's output."""
    msgs = conv["messages"][:-1]
    text, _ = cr.render(msgs, conv["tools"], thinking=conv["thinking"], drop_thinking=True)
    return text


def main():
    sys.path.insert(0, __import__("os").path.dirname(__file__))
    import train
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--chars", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tr, _, _, _ = train.split_corpus(train.read_chapters(a.corpus))
    pool = VersePool(verses_of(tr))
    profiles = Profiles(rng)
    print(f"{len(profiles.paras)} paragraphs, {len(profiles.funcs)} function schemas, {len(pool.topics)} topics")
    for i in range(a.n):
        prof = profiles.make(a.chars if i % 2 else 0)
        conv = make_conversation(pool, prof, rng, profiles)
        text, spans = render_conversation(conv)
        print(f"==== {len(text)} chars, spans {spans}\n{text[-1500:]}\n")
        for b, e, ok in spans:
            print(f"  span ({'trained' if ok else 'context'}): {text[b:e]!r}")


if __name__ == "__main__":
    main()
