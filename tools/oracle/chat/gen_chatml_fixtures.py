#!/usr/bin/env python3
"""ChatML (Qwen3.5/3.6) render fixtures: runs a Qwen chat template with Jinja2 the way
transformers' apply_chat_template does (sandboxed environment, trim_blocks, lstrip_blocks,
loop controls, tojson = json.dumps(ensure_ascii=False), raise_exception) on OpenAI-style chat
requests and writes the expected prompts as a JSON fixture.

Two templates, two fixtures (same conversations; the last ones pass the template kwarg
preserve_thinking, which only Qwen3.6's template reads):

    # Qwen3.5: models/templates/Qwen3.5-4B.jinja of llama.cpp v0.5.0 (the git bundle inside
    # npm node-llama-cpp@3.22.1); not vendored here
    python3 tools/oracle/chat/gen_chatml_fixtures.py Qwen3.5-4B.jinja \
        tests/fixtures/chat/chatml_render_cases.json
    # Qwen3.6-35B-A3B: vendored, provenance in tests/fixtures/chat/templates/README.md
    python3 tools/oracle/chat/gen_chatml_fixtures.py \
        tests/fixtures/chat/templates/Qwen3.6-35B-A3B.jinja \
        tests/fixtures/chat/chatml36_render_cases.json

With --check OUT is compared with what would be written (exit status 1 on a difference; the
ctest chatml36_fixture_from_template). A request's "chat_template_kwargs" (as a vLLM or
llama-server client sends it) are passed to the template as variables.

Needs only Python 3 and jinja2 (Debian python3-jinja2).
"""
import hashlib
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web — returns ünïcode snippets",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "filters": {"type": "object"}, "top": {"type": "number"}}}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CASES = [
    ("user_only", {"messages": [{"role": "user", "content": "Hello!"}]}, True),
    ("system_user", {"messages": [{"role": "system", "content": "  You are terse.\n"},
                                  {"role": "user", "content": "Say hi"}]}, True),
    ("no_thinking", {"messages": [{"role": "user", "content": "2+2?"}]}, False),
    ("multi_turn", {"messages": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "Second question\n\n"}]}, True),
    ("reasoning_after_last_query", {"messages": [
        {"role": "user", "content": "Question"},
        {"role": "assistant", "content": "Partial answer", "reasoning_content": "\nthinking it over\n"},
        {"role": "user", "content": "<tool_response>\nnot really a tool\n</tool_response>"}]}, True),
    ("think_in_content", {"messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nmy reasoning\n</think>\n\nthe answer"},
        {"role": "user", "content": "Q2"}]}, True),
    ("unicode_whitespace", {"messages": [
        {"role": "user", "content": "\u3000 héllo wörld — 你好 🙂 \u00a0"}]}, True),
    ("tools_no_system", {"tools": [WEATHER], "messages": [{"role": "user", "content": "Weather in Paris?"}]}, True),
    ("tools_with_system", {"tools": [WEATHER, SEARCH], "messages": [
        {"role": "system", "content": "You help with travel."},
        {"role": "user", "content": "Weather in Paris?"}]}, True),
    ("tool_round_trip", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris for 3 days?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
         "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "days": 3})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}]}, True),
    ("two_calls_two_results", {"tools": [WEATHER, SEARCH], "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Compare Paris and Rome"},
        {"role": "assistant", "content": "Let me check both.",
         "tool_calls": [call("c1", "get_weather", {"city": "Paris"}),
                        call("c2", "search", {"query": "Rome weather", "filters": {"lang": "it", "n": [1, 2.5]},
                                              "top": 0.5})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "  rainy  "},
        {"role": "assistant", "content": "Paris is sunny, Rome is rainy."},
        {"role": "user", "content": "Thanks"}]}, True),
    ("tool_result_then_no_thinking", {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", {"city": "Oslo", "days": 1})]},
        {"role": "tool", "tool_call_id": "c1", "content": "snow"}]}, False),
    ("scalar_args", {"tools": [SEARCH], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok",
         "tool_calls": [call("c1", "search", {"query": "a \"quoted\" line\nnext", "top": 3, "flag": True,
                                               "none": None, "f": 1e-05})]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": "again"}]}, True),
]

# Qwen3.6 reads preserve_thinking: reasoning of every assistant turn stays in the prompt.
HISTORY = [
    {"role": "system", "content": "Be kind."},
    {"role": "user", "content": "First question"},
    {"role": "assistant", "content": "First answer", "reasoning_content": "old thoughts"},
    {"role": "user", "content": "Second question"},
    {"role": "assistant", "content": "<think>\ninline thoughts\n</think>\n\nSecond answer"},
    {"role": "user", "content": "Third question"}]
CASES += [
    ("preserve_thinking", {"messages": HISTORY, "chat_template_kwargs": {"preserve_thinking": True}}, True),
    ("preserve_thinking_false", {"messages": HISTORY, "chat_template_kwargs": {"preserve_thinking": False}}, True),
    ("preserve_thinking_no_thinking", {"messages": HISTORY, "chat_template_kwargs": {"preserve_thinking": True}},
     False),
    ("preserve_thinking_tools", {"tools": [WEATHER], "chat_template_kwargs": {"preserve_thinking": True},
                                 "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
         "tool_calls": [call("c1", "get_weather", {"city": "Oslo", "days": 2})]},
        {"role": "tool", "tool_call_id": "c1", "content": "snow"},
        {"role": "assistant", "content": "It snows.", "reasoning_content": "Answer now."},
        {"role": "user", "content": "And tomorrow?"}]}, True),
    ("scalar_args_nested", {"tools": [SEARCH], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("c1", "search", {"query": "x", "flag": False, "list": [True, None, "s"],
                                               "obj": {"k": True, "n": None}, "neg": -2, "big": 12345678901234567890,
                                               "half": 0.5, "empty": "", "ws": "  padded  "})]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}, True),
]


def to_template_messages(req):
    out = []
    for m in req["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            tcs = []
            for tc in m["tool_calls"]:
                fn = dict(tc["function"])
                fn["arguments"] = json.loads(fn["arguments"])
                tcs.append({"id": tc["id"], "type": "function", "function": fn})
            m["tool_calls"] = tcs
        out.append(m)
    return out


def render_cases(src):
    tpl = make_env().from_string(src)
    cases = []
    for name, req, thinking in CASES:
        kw = dict(req.get("chat_template_kwargs", {}))
        kw.update(messages=to_template_messages(req), add_generation_prompt=True)
        if req.get("tools"):
            kw["tools"] = req["tools"]
        if not thinking:
            kw["enable_thinking"] = False
        text = tpl.render(**kw)
        cases.append({"name": name, "request": req, "thinking": thinking, "expected": text})
    return cases


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    if len(args) != 2:
        sys.exit("usage: gen_chatml_fixtures.py TEMPLATE.jinja OUT.json [--check]")
    tpl_path, path = args
    with open(tpl_path, "rb") as f:
        raw = f.read()
    src = raw.decode("utf-8")
    doc = {"generator": "tools/oracle/chat/gen_chatml_fixtures.py",
           "template": os.path.basename(tpl_path),
           "template_sha256": hashlib.sha256(raw).hexdigest(),
           "jinja2": jinja2.__version__, "cases": render_cases(src)}
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    if check:
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        # The fixture records the Jinja2 that wrote it; any 3.x renders these templates alike.
        old["jinja2"] = doc["jinja2"]
        if old != doc:
            names = [c["name"] for c in doc["cases"]]
            bad = [n for n, a, b in zip(names, old.get("cases", []), doc["cases"]) if a != b]
            print(f"{path}: differs from what {tpl_path} renders "
                  f"(cases {bad or 'count/metadata'}); regenerate it", file=sys.stderr)
            sys.exit(1)
        print(f"{path}: {len(doc['cases'])} cases match {tpl_path}")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}: {len(doc['cases'])} cases")


if __name__ == "__main__":
    main()
