#!/usr/bin/env python3
"""DeepSeek V4 chat prompts in Python, the subset the chat demo model is trained on, written to
match src/chat/renderer.cpp (and so DeepSeek's encoding_dsv4.py) byte for byte.

Messages are OpenAI chat-completions dicts: roles system, developer, user, assistant (content,
reasoning_content, tool_calls with JSON-string arguments) and tool; `tools` is the request's
list of {"type": "function", "function": {...}}. Thinking is "high" or "none"; drop_thinking
as the server's default (True). Not covered (never generated for training): latest_reminder,
tasks, response_format, Think-Max, content parts.

Besides the text, render() returns the character spans the model must learn to write: each
assistant message's own output (reasoning, "</think>", content, tool calls, EOS), i.e. what
follows the generation prompt "<｜Assistant｜><think>" or "<｜Assistant｜></think>".

Self-test (no third-party packages): python3 chat_render.py --check tests/fixtures/chat/render_cases.json
"""
import json
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

TOOLS_HEAD = (
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n")
TOOLS_TAIL = ("\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
              "tool calls.\n")


def dumps(v):
    return json.dumps(v, ensure_ascii=False)


def tool_calls_block(calls):
    invokes = []
    for c in calls:
        fn = c["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        params = []
        for k, v in args.items():
            if isinstance(v, str):
                params.append(f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>')
            else:
                params.append(f'<｜DSML｜parameter name="{k}" string="false">{dumps(v)}</｜DSML｜parameter>')
        invokes.append(f'<｜DSML｜invoke name="{fn["name"]}">\n' + "\n".join(params) + "\n</｜DSML｜invoke>")
    return "\n\n<｜DSML｜tool_calls>\n" + "\n".join(invokes) + "\n</｜DSML｜tool_calls>"


def _turns(messages, tools):
    """merge_tool_messages + sort_tool_results_by_call_order; request tools go on the first
    system message (a new empty one at the front when there is none), as the parser does."""
    msgs = [dict(m) for m in messages]
    if tools:
        for m in msgs:
            if m["role"] == "system":
                m["tools"] = tools
                break
        else:
            msgs.insert(0, {"role": "system", "content": "", "tools": tools})
    turns = []
    for m in msgs:
        if m["role"] == "tool":
            b = ("tool", m.get("content") or "", m.get("tool_call_id"))
            if turns and turns[-1]["role"] == "user":
                turns[-1]["blocks"].append(b)
            else:
                turns.append({"role": "user", "blocks": [b]})
        elif m["role"] == "user":
            b = ("text", m.get("content") or "", None)
            if turns and turns[-1]["role"] == "user":
                turns[-1]["blocks"].append(b)
            else:
                turns.append({"role": "user", "blocks": [b]})
        else:
            turns.append({"role": m["role"], "msg": m})
    order = {}
    for t in turns:
        if t["role"] == "assistant" and t["msg"].get("tool_calls"):
            order = {c["id"]: k for k, c in enumerate(t["msg"]["tool_calls"]) if c.get("id")}
        elif t["role"] == "user" and order:
            slots = [i for i, b in enumerate(t["blocks"]) if b[0] == "tool"]
            if len(slots) > 1:
                srt = sorted((t["blocks"][i] for i in slots), key=lambda b: order.get(b[2], 0))
                for i, b in zip(slots, srt):
                    t["blocks"][i] = b
    return turns


def render(messages, tools=None, thinking=True, drop_thinking=True, add_bos=True):
    """Returns (text, spans): spans = [(begin, end)] character ranges of assistant output."""
    turns = _turns(messages, tools)
    any_tools = bool(tools) or any(m.get("tools") for m in messages)
    drop = drop_thinking and not any_tools
    user_like = ("user", "developer")
    if thinking and drop:
        last = max([i for i, t in enumerate(turns) if t["role"] in user_like], default=-1)
        turns = [t for i, t in enumerate(turns) if not (t["role"] == "developer" and i < last)]
    last_user = max([i for i, t in enumerate(turns) if t["role"] in user_like], default=-1)
    out = [BOS] if add_bos else []
    n = len(out[0]) if out else 0
    spans = []

    def put(s):
        nonlocal n
        out.append(s)
        n += len(s)

    for i, t in enumerate(turns):
        r = t["role"]
        if r in ("system", "developer"):
            m = t["msg"]
            if r == "developer":
                if not m.get("content"):
                    raise ValueError(f"turn {i}: developer message needs non-empty content")
                put(USER)
            put(m.get("content") or "")
            if m.get("tools"):
                put("\n\n" + TOOLS_HEAD + "\n".join(dumps(x["function"] if "function" in x else x)
                                                    for x in m["tools"]) + TOOLS_TAIL)
        elif r == "user":
            put(USER)
            put("\n\n".join(f"<tool_result>{b[1]}</tool_result>" if b[0] == "tool" else b[1]
                            for b in t["blocks"]))
        elif r == "assistant":
            m = t["msg"]
            b = n
            if thinking and (not drop or i > last_user):
                put((m.get("reasoning_content") or "") + THINK_CLOSE)
            put(m.get("content") or "")
            if m.get("tool_calls"):
                put(tool_calls_block(m["tool_calls"]))
            put(EOS)
            spans.append((b, n))
        else:
            raise ValueError(f"turn {i}: role {r!r} is not rendered here")
        if i + 1 < len(turns) and turns[i + 1]["role"] != "assistant":
            continue
        if r in user_like:
            put(ASSISTANT)
            put(THINK_OPEN if thinking and (not drop or i >= last_user) else THINK_CLOSE)
    return "".join(out), spans


SUPPORTED_ROLES = {"system", "developer", "user", "assistant", "tool"}


def check(path):
    """Compares render() with the official encoder's outputs on every fixture case this subset
    covers; returns the number of mismatches."""
    fx = json.load(open(path, encoding="utf-8"))
    bad = used = 0
    for c in fx["cases"]:
        o, req = c["options"], c["request"]
        msgs = req.get("messages", [])
        if (o["thinking"] not in ("high", "none") or o.get("lenient_arguments") or not msgs
                or req.get("response_format") or any(m.get("role") not in SUPPORTED_ROLES or m.get("task")
                                                     or m.get("response_format") or m.get("prefix") is not None
                                                     or m.get("wo_eos") or not isinstance(m.get("content", ""), (str, type(None)))
                                                     for m in msgs)):
            continue
        try:
            got, _ = render(msgs, req.get("tools"), thinking=o["thinking"] == "high",
                            drop_thinking=o["drop_thinking"])
        except Exception as e:  # noqa: BLE001
            got = f"<error {e}>"
        used += 1
        if got != c["expected"]:
            bad += 1
            k = next((i for i, (a, b) in enumerate(zip(got, c["expected"])) if a != b), min(len(got), len(c["expected"])))
            print(f"MISMATCH {c['name']} at char {k}:\n got  {got[max(0, k - 60):k + 60]!r}\n want "
                  f"{c['expected'][max(0, k - 60):k + 60]!r}")
    print(f"chat_render: {used - bad}/{used} fixture cases identical")
    return bad if used else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(1 if check(sys.argv[2]) else 0)
    print(__doc__)
    sys.exit(2)
