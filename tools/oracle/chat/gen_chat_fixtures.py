#!/usr/bin/env python3
"""Generate tests/fixtures/chat/{render,parse}_cases.json with DeepSeek's official V4 encoder.

Usage: gen_chat_fixtures.py PATH/TO/encoding_dsv4.py OUT_DIR

render_cases.json: conversations and the prompt text `encode_messages` produces.
parse_cases.json: completion texts and what `parse_message_from_completion_text` returns
(or that it rejects them).

The encoder is DeepSeek's `encoding/encoding_dsv4.py` from the DeepSeek-V4 release (not
part of this repository; pass its path). When the release's `tests/` folder sits next to
it, its four official cases (test_input_N.json / test_output_N.txt) are checked against the
encoder and included with the official gold text as expectation.

Each case is an OpenAI-style request plus render options. The mapping from request to the
encoder call is the convention ds4::chat uses (see src/chat/openai_parse.h):
  * top-level "tools" go on messages[0] when it is a system message, else on a new system
    message with empty content put in front;
  * thinking "none" -> thinking_mode "chat"; "high" -> "thinking"; "max" -> "thinking" with
    reasoning_effort "max" only when context_size >= 393216 (else "high").
"""
import copy
import importlib.util
import json
import os
import sys

THINK_MAX_MIN_CONTEXT = 393216


def load_encoder(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def encode(enc, request, options):
    messages = copy.deepcopy(request.get("messages", []))
    tools = request.get("tools")
    if tools:
        if messages and messages[0].get("role") == "system":
            messages[0]["tools"] = list(messages[0].get("tools") or []) + tools
        else:
            messages.insert(0, {"role": "system", "content": "", "tools": tools})
    thinking = options.get("thinking", "high")
    mode = "chat" if thinking == "none" else "thinking"
    effort = None
    if thinking == "high":
        effort = "high"
    elif thinking == "max":
        effort = "max" if options.get("context_size", 0) >= THINK_MAX_MIN_CONTEXT else "high"
    return enc.encode_messages(messages, thinking_mode=mode,
                               drop_thinking=options.get("drop_thinking", True),
                               reasoning_effort=effort)


def fn(name, desc, props, required=None):
    params = {"type": "object", "properties": props}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


WEATHER = fn("get_weather", "Get the current weather for a city.",
             {"city": {"type": "string", "description": "City name"},
              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"])
SEARCH = fn("search", "Web search. Split multiple queries with '||'.",
            {"queries": {"type": "string"}}, ["queries"])
ODD_SCHEMA = fn("odd", "Tab\there, quote \" backslash \\ and control \u0001 — ünïcödé 日本語 🚀",
                {"ratio": {"type": "number", "minimum": 0.0, "maximum": 1.5, "multipleOf": 1e-07,
                           "default": 100.0, "big": 1e16, "neg": -12345678901234, "exp": 2.5e-05},
                 "flag": {"type": "boolean", "default": False}, "nothing": {"default": None}})


def tc(id_, name, args):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


SYS = {"role": "system", "content": "You are a helpful assistant."}


def case(name, messages, thinking="high", tools=None, context_size=1048576, drop_thinking=True,
         lenient=False, note=""):
    req = {"messages": messages}
    if tools is not None:
        req["tools"] = tools
    opts = {"thinking": thinking, "context_size": context_size, "drop_thinking": drop_thinking,
            "lenient_arguments": lenient}
    return {"name": name, "note": note, "request": req, "options": opts}


def cases():
    u = lambda c: {"role": "user", "content": c}
    a = lambda c, r=None, **kw: dict({"role": "assistant", "content": c}, **({"reasoning_content": r} if r is not None else {}), **kw)
    tool = lambda id_, c: {"role": "tool", "tool_call_id": id_, "content": c}
    out = []
    out.append(case("chat_single_user", [u("Hello")], thinking="none"))
    out.append(case("think_high_single_user", [SYS, u("What is 2+2?")]))
    out.append(case("think_max_large_context", [SYS, u("Prove it.")], thinking="max", context_size=1048576))
    out.append(case("think_max_small_context_falls_back", [SYS, u("Prove it.")], thinking="max", context_size=65536))
    out.append(case("think_max_at_threshold", [u("Prove it.")], thinking="max", context_size=393216,
                    note="prefix right after BOS, before <｜User｜> (no system message)"))
    out.append(case("think_max_just_below_threshold", [u("Prove it.")], thinking="max", context_size=393215))
    out.append(case("chat_multi_turn", [SYS, u("Hi"), a("Hello! How can I help?", "greet"), u("Tell me a joke")], thinking="none",
                    note="reasoning_content ignored in chat mode"))
    out.append(case("think_multi_turn_drops_history_reasoning",
                    [SYS, u("Hi"), a("Hello!", "The user greets."), u("2+2?"), a("4", "Simple math."), u("And 3+3?")]))
    out.append(case("think_multi_turn_keep_reasoning_when_drop_disabled",
                    [SYS, u("Hi"), a("Hello!", "The user greets."), u("2+2?")], drop_thinking=False))
    out.append(case("think_tools_keep_all_reasoning",
                    [SYS, u("Hi"), a("Hello!", "The user greets."), u("Weather in Rome?")], tools=[WEATHER],
                    note="tools present disable the reasoning drop"))
    out.append(case("tools_without_system_message", [u("Weather in Paris?")], tools=[WEATHER, SEARCH],
                    note="empty system message created to carry the tools"))
    out.append(case("chat_tools_with_system", [SYS, u("Weather in Paris?")], thinking="none", tools=[WEATHER]))
    out.append(case("think_tool_call_round_trip",
                    [SYS, u("Weather in Beijing?"),
                     a(None, "Use the tool.", tool_calls=[tc("call_1", "get_weather", {"city": "Beijing", "unit": "celsius"})]),
                     tool("call_1", '{"temperature": 22}'),
                     a("It is 22°C.", "Format the answer.")], tools=[WEATHER]))
    out.append(case("parallel_calls_results_sorted_by_call_order",
                    [SYS, u("Weather in A and B?"),
                     a("", "Two calls.", tool_calls=[tc("c_a", "get_weather", {"city": "A"}), tc("c_b", "get_weather", {"city": "B"})]),
                     tool("c_b", "B: rain"), tool("c_a", "A: sun")], tools=[WEATHER]))
    out.append(case("tool_results_unknown_id_rank_zero",
                    [SYS, u("Three?"),
                     a("", "", tool_calls=[tc("x1", "search", {"queries": "a"}), tc("x2", "search", {"queries": "b"}), tc("x3", "search", {"queries": "c"})]),
                     tool("x3", "r3"), tool("zz", "unknown"), tool("x2", "r2"), tool("x1", "r1")], tools=[SEARCH]))
    out.append(case("tool_result_then_user_text_merge",
                    [SYS, u("Search it"),
                     a("", "go", tool_calls=[tc("s1", "search", {"queries": "q"})]),
                     tool("s1", "found"), u("Thanks, summarize.")], tools=[SEARCH]))
    out.append(case("consecutive_user_messages_merge", [SYS, u("First part."), u("Second part.")]))
    out.append(case("tool_content_parts",
                    [SYS, u("Look"), a("", "", tool_calls=[tc("p1", "search", {"queries": "x"})]),
                     {"role": "tool", "tool_call_id": "p1",
                      "content": [{"type": "text", "text": "line one"}, {"type": "image_url", "image_url": {"url": "http://x"}}, {"type": "text", "text": "line two"}]}],
                    tools=[SEARCH]))
    out.append(case("argument_types",
                    [SYS, u("Do it"),
                     a("", "", tool_calls=[tc("t1", "odd", '{"n": 3, "f": 0.5, "big": 1e16, "tiny": 1e-7, "whole": 2.0, "b": true, "z": null, "arr": [1, "two", {"k": [false]}], "obj": {"x": 1, "y": "é"}, "s": "text"}')])],
                    tools=[ODD_SCHEMA], note="non-string values via Python json.dumps"))
    out.append(case("argument_key_order_preserved",
                    [SYS, u("Do it"), a("", "", tool_calls=[tc("k1", "odd", '{"zeta": 1, "alpha": "a", "mid": [3, 2, 1]}')])],
                    tools=[ODD_SCHEMA]))
    out.append(case("argument_empty_object",
                    [SYS, u("Ping"), a("", "", tool_calls=[tc("e1", "ping", "{}")])], thinking="none"))
    out.append(case("argument_strings_raw",
                    [SYS, u("Write"),
                     a("", "", tool_calls=[tc("w1", "write_file", {"path": "a \"quoted\" path", "text": "line1\nline2\n<tag> & </｜DSML｜parameter> \\ end"})])],
                    thinking="none", note="string parameters are written raw, no escaping"))
    out.append(case("lenient_invalid_arguments",
                    [SYS, u("Go"), a("", "", tool_calls=[tc("l1", "search", "not json {")])], thinking="none", lenient=True,
                    note="official fallback: one string parameter named 'arguments'"))
    out.append(case("trailing_assistant_no_generation_prompt",
                    [SYS, u("Hi"), a("Hello!", "greeting")]))
    out.append(case("trailing_assistant_wo_eos",
                    [SYS, u("Write a poem"), dict(a("Roses are", "Start"), wo_eos=True)],
                    note="partial assistant turn left open for continuation"))
    out.append(case("chat_assistant_null_content_tool_call",
                    [SYS, u("Weather?"), a(None, tool_calls=[tc("n1", "get_weather", {"city": "Oslo"})]), tool("n1", "cold"), a("Cold.")],
                    thinking="none", tools=[WEATHER]))
    out.append(case("developer_with_tools_thinking",
                    [{"role": "system", "content": "Base."},
                     {"role": "developer", "content": "Answer with citations.", "tools": [SEARCH]},
                     a("", "search first", tool_calls=[tc(None, "search", {"queries": "x"})]),
                     tool(None, "[0]"), a("Done.", "compose")]))
    out.append(case("developer_before_last_user_dropped",
                    [SYS, {"role": "developer", "content": "Old instructions."}, a("ok", "r0"), u("New question")],
                    note="_drop_thinking_messages removes developer turns before the last user"))
    out.append(case("developer_kept_in_chat_mode",
                    [SYS, {"role": "developer", "content": "Old instructions."}, a("ok", "r0"), u("New question")], thinking="none"))
    out.append(case("latest_reminder_before_user",
                    [SYS, {"role": "latest_reminder", "content": "2026-01-01, Rome"}, u("What day is it?")]))
    out.append(case("latest_reminder_after_user",
                    [SYS, u("What day is it?"), {"role": "latest_reminder", "content": "2026-01-01"}],
                    note="transition is written before the reminder"))
    out.append(case("response_format_on_system",
                    [{"role": "system", "content": "Reply in JSON.", "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}}, u("Go")]))
    out.append(case("falsy_response_format_ignored",
                    [{"role": "system", "content": "S", "response_format": {}},
                     {"role": "developer", "content": "D", "response_format": ""}, u("Go")], thinking="none"))
    out.append(case("task_action_chat",
                    [SYS, u("Classify"), a("fine"), dict(u("What should I do?"), task="action"), a("Search")], thinking="none"))
    out.append(case("task_query_thinking",
                    [SYS, dict(u("Extract the query"), task="query")]))
    out.append(case("task_action_thinking_then_answer",
                    [SYS, dict(u("Act?"), task="action"), a("Search", "ignored")],
                    note="assistant after a task turn has no thinking part"))
    out.append(case("unicode_and_emoji", [{"role": "system", "content": "你是助手。"}, u("Ünïcödé 🚀 日本語\n\nnew paragraph\t")], thinking="none"))
    out.append(case("odd_schema_dump", [SYS, u("x")], tools=[ODD_SCHEMA], thinking="none"))
    out.append(case("empty_system_thinking_with_tools", [{"role": "system", "content": ""}, u("Weather?")], tools=[WEATHER]))
    out.append(case("null_system_content", [{"role": "system", "content": None}, u("Hi")]))
    out.append(case("multi_step_agent_no_tool_schemas",
                    [SYS, u("Plan"),
                     a("", "step 1", tool_calls=[tc("m1", "search", {"queries": "a"})]), tool("m1", "A"),
                     a("", "step 2", tool_calls=[tc("m2", "search", {"queries": "b"})]), tool("m2", "B")],
                    note="no tools defined: earlier reasoning dropped; tool results are user turns"))
    out.append(case("argument_duplicate_keys_last_value_first_position",
                    [SYS, u("Dup"), a("", "", tool_calls=[tc("d1", "odd", '{"a": 1, "b": "x", "a": [2]}')])], thinking="none",
                    note="Python dicts keep the first position and the last value"))
    out.append(case("argument_number_spellings",
                    [SYS, u("Num"), a("", "", tool_calls=[tc("n2", "odd", '{"i": -0, "f": -0.0, "e": 1E2, "s": 1.50, "u": "\\u00e9\\n"}')])], thinking="none",
                    note="numbers re-serialized the Python way, escapes decoded"))
    out.append(case("task_title_chat", [SYS, dict(u("Summarize as a title"), task="title")], thinking="none"))
    out.append(case("task_read_url_then_tool", [SYS, dict(u("Read it"), task="read_url"), tool("r", "page")], thinking="none",
                    note="a tool result merges into a task user turn"))
    out.append(case("empty_conversation", [], note="BOS only"))
    out.append(case("system_only", [SYS], note="no generation prompt after a system message"))
    out.append(case("empty_user_content", [SYS, u("")]))
    # System turns after the first message (Claude Code sends its environment text this way):
    # the encoder writes a system message's content as is wherever it appears.
    envsys = {"role": "system", "content": "<env>cwd: /tmp/x</env>"}
    out.append(case("mid_system_after_user_thinking", [SYS, u("Hi"), envsys, u("List files")],
                    note="system turn between two user messages"))
    out.append(case("mid_system_after_first_user_chat", [u("Hi"), envsys], thinking="none",
                    note="trailing system turn: no generation prompt"))
    out.append(case("mid_system_after_assistant_thinking",
                    [SYS, u("Hi"), a("Hello!", "greet"), envsys, u("Next")],
                    note="system turn after an assistant's end of sentence"))
    out.append(case("mid_system_in_tool_loop",
                    [SYS, u("Weather?"),
                     a("", "call it", tool_calls=[tc("ms1", "get_weather", {"city": "Oslo"})]),
                     tool("ms1", "cold"), envsys, a("Cold.", "answer")], tools=[WEATHER],
                    note="system turn between a tool result and the assistant's reply"))
    out.append(case("chat_trailing_tool_result_generation",
                    [u("Search"), a("", tool_calls=[tc("q1", "search", {"queries": "z"})]), tool("q1", "result")],
                    thinking="none", tools=[SEARCH]))
    return out


def official_cases(enc, enc_path):
    tests_dir = os.path.join(os.path.dirname(os.path.abspath(enc_path)), "tests")
    found = []
    modes = {1: "thinking", 2: "thinking", 3: "thinking", 4: "chat"}
    for n in range(1, 5):
        inp = os.path.join(tests_dir, f"test_input_{n}.json")
        gold = os.path.join(tests_dir, f"test_output_{n}.txt")
        if not (os.path.exists(inp) and os.path.exists(gold)):
            continue
        data = json.load(open(inp, encoding="utf-8"))
        gold_text = open(gold, encoding="utf-8").read()
        request = data if isinstance(data, dict) else {"messages": data}
        thinking = "high" if modes[n] == "thinking" else "none"
        opts = {"thinking": thinking, "context_size": 1048576, "drop_thinking": True, "lenient_arguments": False}
        got = encode(enc, request, opts)
        if got != gold_text:
            sys.exit(f"official case {n}: encoder output differs from test_output_{n}.txt")
        found.append({"name": f"official_test_{n}", "note": "DeepSeek release encoding/tests",
                      "source": f"encoding/tests/test_output_{n}.txt (official gold)",
                      "request": request, "options": opts, "expected": gold_text})
    return found


EOS = "<｜end▁of▁sentence｜>"


def blk(*invokes):
    return "\n\n<｜DSML｜tool_calls>\n" + "\n".join(invokes) + "\n</｜DSML｜tool_calls>"


def inv(name, *params):
    return f'<｜DSML｜invoke name="{name}">\n' + "\n".join(params) + "\n</｜DSML｜invoke>"


def par(name, value, is_str=True):
    return f'<｜DSML｜parameter name="{name}" string="{"true" if is_str else "false"}">{value}</｜DSML｜parameter>'


def completions():
    T, C = "thinking", "chat"
    return [
        ("think_plain", T, "Simple arithmetic.</think>2 + 2 = 4." + EOS),
        ("chat_plain", C, "Hello there!" + EOS),
        ("think_empty_reasoning", T, "</think>Direct." + EOS),
        ("chat_blank_lines_not_dsml", C, "a\n\nb\n\n<tag>\n" + EOS),
        ("think_one_call", T, "Need weather.</think>" + blk(inv("get_weather", par("city", "Paris"))) + EOS),
        ("chat_content_then_call", C, "Let me check." + blk(inv("get_weather", par("city", "Rome"), par("days", "3", False))) + EOS),
        ("think_two_calls_mixed_types", T, "plan</think>" + blk(
            inv("odd", par("n", "-1.5e-07", False), par("arr", '[1, "two", {"k": null}]', False), par("b", "true", False)),
            inv("write_file", par("path", "/tmp/x y"), par("text", "line1\nline2 <b> & \" ' \\ end"))) + EOS),
        ("chat_zero_param_invoke", C, blk(inv("ping")) + EOS),
        ("think_unicode", T, "思考。</think>" + blk(inv("搜索", par("查询", "日本語 🚀"))) + EOS),
        ("err_missing_newline_after_open", C, "\n\n<｜DSML｜tool_calls>" + inv("f", par("a", "1")) + "\n</｜DSML｜tool_calls>" + EOS),
        ("err_duplicate_param", C, blk(inv("f", par("a", "1"), par("a", "2"))) + EOS),
        ("err_text_after_block", C, blk(inv("f", par("a", "1"))) + "trailing" + EOS),
        ("err_think_unclosed", T, "still thinking" + EOS),
        ("err_bad_string_attr", C, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS),
        ("err_call_in_reasoning", T, "thinking" + blk(inv("f", par("a", "1"))) + "</think>" + EOS),
        ("err_bad_invoke_header", C, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n" + par("a", "1") + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS),
        ("err_missing_param_separator", C, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n" + par("a", "1") + par("b", "2") + "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS),
    ]


def parse_cases(enc):
    out = []
    for name, mode, text in completions():
        entry = {"name": name, "thinking_mode": mode, "text": text}
        try:
            msg = enc.parse_message_from_completion_text(text, thinking_mode=mode)
            entry["ok"] = True
            entry["reasoning_content"] = msg["reasoning_content"]
            entry["content"] = msg["content"]
            entry["tool_calls"] = [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                                   for t in msg["tool_calls"]]
        except (AssertionError, ValueError) as e:
            entry["ok"] = False
            entry["official_error"] = str(e)
        out.append(entry)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    enc_path, out_dir = sys.argv[1], sys.argv[2]
    out_path = os.path.join(out_dir, "render_cases.json")
    enc = load_encoder(enc_path)
    result = official_cases(enc, enc_path)
    for c in cases():
        c["source"] = "encoding_dsv4.py encode_messages (run by tools/oracle/chat/gen_chat_fixtures.py)"
        c["expected"] = encode(enc, c["request"], c["options"])
        result.append(c)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/oracle/chat/gen_chat_fixtures.py",
                   "encoder": "DeepSeek-V4 encoding/encoding_dsv4.py", "cases": result},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(result)} cases to {out_path}")
    pc = parse_cases(enc)
    with open(os.path.join(out_dir, "parse_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/oracle/chat/gen_chat_fixtures.py",
                   "encoder": "DeepSeek-V4 encoding/encoding_dsv4.py parse_message_from_completion_text",
                   "cases": pc}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(pc)} parse cases")


if __name__ == "__main__":
    main()
