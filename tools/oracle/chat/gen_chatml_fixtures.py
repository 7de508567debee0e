#!/usr/bin/env python3
"""ChatML (Qwen3.5/3.6) render fixtures: runs the Qwen3.5 chat template with Jinja2 the way
transformers' apply_chat_template does (sandboxed environment, trim_blocks, lstrip_blocks,
loop controls, tojson = json.dumps(ensure_ascii=False), raise_exception) on OpenAI-style chat
requests and writes tests/fixtures/chat/chatml_render_cases.json.

The template is not vendored: pass its path. The committed fixture was made with
models/templates/Qwen3.5-4B.jinja of llama.cpp v0.5.0 (the git bundle inside npm
node-llama-cpp@3.22.1), the Qwen3.5 template the qwen35moe GGUFs carry.

    python3 tools/oracle/chat/gen_chatml_fixtures.py TEMPLATE.jinja tests/fixtures/chat

Needs only Python 3 and jinja2.
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


def main():
    tpl_path, out_dir = sys.argv[1], sys.argv[2]
    src = open(tpl_path, encoding="utf-8").read()
    tpl = make_env().from_string(src)
    cases = []
    for name, req, thinking in CASES:
        kw = dict(messages=to_template_messages(req), add_generation_prompt=True)
        if req.get("tools"):
            kw["tools"] = req["tools"]
        if not thinking:
            kw["enable_thinking"] = False
        text = tpl.render(**kw)
        cases.append({"name": name, "request": req, "thinking": thinking, "expected": text})
    doc = {"generator": "tools/oracle/chat/gen_chatml_fixtures.py",
           "template": os.path.basename(tpl_path),
           "template_sha256": hashlib.sha256(src.encode("utf-8")).hexdigest(),
           "jinja2": jinja2.__version__, "cases": cases}
    path = os.path.join(out_dir, "chatml_render_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
