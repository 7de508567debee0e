#include "chat/chatml.h"

#include <algorithm>

#include "chat/py_json.h"
#include "core/error.h"

namespace ds4::chat {

namespace {

using namespace chatml;

// Python str.isspace() characters (what Jinja's `trim`, i.e. str.strip(), removes).
size_t space_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  auto is = [&](std::string_view u) { return s.substr(i, u.size()) == u ? u.size() : 0; };
  for (std::string_view u : {"\u0085", "\u00a0", "\u1680", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"})
    if (size_t n = is(u)) return n;
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
      static_cast<unsigned char>(s[i + 2]) >= 0x80 && static_cast<unsigned char>(s[i + 2]) <= 0x8A)
    return 3;  // U+2000..U+200A
  return 0;
}

std::string trim(std::string_view s) {
  size_t a = 0;
  while (a < s.size()) {
    const size_t n = space_len(s, a);
    if (!n) break;
    a += n;
  }
  size_t b = s.size();
  while (b > a) {
    // Find the start of the last character and test it.
    size_t st = b - 1;
    while (st > a && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    const size_t n = space_len(s, st);
    if (n != b - st) break;
    b = st;
  }
  return std::string(s.substr(a, b - a));
}

std::string_view rstrip_nl(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
std::string_view lstrip_nl(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

// The template's render_content: a string, or the text parts of a list.
std::string content_of(const Message& m, size_t index) {
  if (m.content_parts) {
    std::string out;
    for (const auto& p : *m.content_parts) {
      if (p.type != "text") fail("messages[{}]: content part of type '{}' is not supported (text only)", index, p.type);
      out += p.text;
    }
    return out;
  }
  return m.content.value_or("");
}

// Python str() of a JSON scalar, as Jinja's `string` filter writes it.
std::string py_str(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_number_float()) return py_float_repr(v.get<double>());
  return v.dump();  // integers
}

bool is_system_like(Role r) { return r == Role::System || r == Role::Developer; }

// A sampled tool-call block replayed from history: its tags are control tokens.
void sampled_block(MarkedText& out, std::string_view block) {
  size_t at = 0;
  while (at < block.size()) {
    const size_t a = block.find(kToolCallOpen, at), b = block.find(kToolCallClose, at);
    const size_t i = std::min(a, b);
    if (i == std::string_view::npos) break;
    const std::string_view tag = i == a ? kToolCallOpen : kToolCallClose;
    out.plain(block.substr(at, i - at));
    out.control(tag);
    at = i + tag.size();
  }
  out.plain(block.substr(std::min(at, block.size())));
}

void tool_calls(MarkedText& out, const Message& m, const std::string& content, size_t index, ChatmlTemplate tpl) {
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    const ToolCall& tc = m.tool_calls[k];
    if (k == 0) {
      if (!trim(content).empty()) out.plain("\n\n");
    } else {
      out.plain("\n");
    }
    out.control(kToolCallOpen);
    out.plain("\n<function=" + tc.name + ">\n");
    if (!tc.arguments_valid)
      fail("messages[{}].tool_calls[{}]: arguments are not a JSON object (the chat template needs one)", index, k);
    for (auto it = tc.arguments.begin(); it != tc.arguments.end(); ++it) {
      out.plain("<parameter=" + it.key() + ">\n");
      const Json& v = it.value();
      const bool json = v.is_object() || v.is_array() || (tpl == ChatmlTemplate::Qwen36 && !v.is_string());
      out.plain(json ? py_json_dumps(v) : py_str(v));
      out.plain("\n</parameter>\n");
    }
    out.plain("</function>\n");
    out.control(kToolCallClose);
  }
}

}  // namespace

MarkedText render_chatml_marked(const Conversation& conv, const RenderOptions& opts) {
  const auto& ms = conv.messages;
  if (ms.empty()) fail("messages: no messages provided");
  MarkedText out;
  std::vector<Json> tools;
  for (const auto& m : ms)
    for (const auto& t : m.tools) {
      Json w = Json::object();
      w["type"] = "function";
      w["function"] = t;
      tools.push_back(std::move(w));
    }
  const bool first_system = is_system_like(ms[0].role);
  if (!tools.empty()) {
    out.control(kImStart);
    out.plain("system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for (const auto& t : tools) out.plain("\n" + py_json_dumps(t));
    out.plain("\n</tools>");
    out.plain(
        "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n");
    out.control(kToolCallOpen);
    out.plain(
        "\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
        "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
        "</parameter>\n</function>\n");
    out.control(kToolCallClose);
    out.plain(
        "\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
        "<function=...></function> block must be nested within ");
    out.control(kToolCallOpen);
    out.control(kToolCallClose);
    out.plain(
        " XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your "
        "function call in natural language BEFORE the function call, but NOT after\n- If there is no function call "
        "available, answer the question like normal with your current knowledge and do not tell the user about "
        "function calls\n</IMPORTANT>");
    if (first_system) {
      const std::string c = trim(content_of(ms[0], 0));
      if (!c.empty()) out.plain("\n\n" + c);
    }
    out.control(kImEnd);
    out.plain("\n");
  } else if (first_system) {
    out.control(kImStart);
    out.plain("system\n" + trim(content_of(ms[0], 0)));
    out.control(kImEnd);
    out.plain("\n");
  }

  // The last real user query (not a wrapped tool response): reasoning is kept after it only.
  long last_query = -1;
  for (long i = static_cast<long>(ms.size()) - 1; i >= 0; --i) {
    if (ms[static_cast<size_t>(i)].role != Role::User) continue;
    const std::string c = trim(content_of(ms[static_cast<size_t>(i)], static_cast<size_t>(i)));
    const bool wrapped = c.rfind(kToolResponseOpen, 0) == 0 && c.size() >= kToolResponseClose.size() &&
                         c.compare(c.size() - kToolResponseClose.size(), kToolResponseClose.size(), kToolResponseClose) == 0;
    if (!wrapped) {
      last_query = i;
      break;
    }
  }
  if (last_query < 0) fail("messages: no user query found in messages");

  const bool preserve = opts.preserve_thinking && opts.chatml_template == ChatmlTemplate::Qwen36;
  bool open_assistant = false;  // the last message is an assistant turn left open (no_eos)
  for (size_t i = 0; i < ms.size(); ++i) {
    const Message& m = ms[i];
    std::string content = trim(content_of(m, i));
    switch (m.role) {
      case Role::System:
      case Role::Developer:
        if (i != 0) fail("messages[{}]: a system message must be at the beginning", i);
        break;
      case Role::User:
        out.control(kImStart);
        out.plain("user\n" + content);
        out.control(kImEnd);
        out.plain("\n");
        break;
      case Role::Assistant: {
        std::string reasoning;
        if (m.reasoning_content) {
          reasoning = *m.reasoning_content;
        } else if (content.find(kThinkClose) != std::string::npos) {
          std::string_view before = std::string_view(content).substr(0, content.find(kThinkClose));
          before = rstrip_nl(before);
          const size_t o = before.rfind(kThinkOpen);
          if (o != std::string_view::npos) before = before.substr(o + kThinkOpen.size());
          reasoning = std::string(lstrip_nl(before));
          const std::string after(lstrip_nl(std::string_view(content).substr(content.rfind(kThinkClose) + kThinkClose.size())));
          content = after;
        }
        reasoning = trim(reasoning);
        out.control(kImStart);
        out.plain("assistant\n");
        if (static_cast<long>(i) > last_query || preserve) {
          out.control(kThinkOpen);
          out.plain("\n" + reasoning + "\n");
          out.control(kThinkClose);
          out.plain("\n\n");
        }
        out.plain(content);
        if (m.raw_tool_block && !m.tool_calls.empty()) sampled_block(out, *m.raw_tool_block);
        else tool_calls(out, m, content, i, opts.chatml_template);
        if (m.no_eos && i + 1 == ms.size()) {
          open_assistant = true;
        } else {
          out.control(kImEnd);
          out.plain("\n");
        }
        break;
      }
      case Role::Tool: {
        if (i > 0 && ms[i - 1].role != Role::Tool) {
          out.control(kImStart);
          out.plain("user");
        }
        out.plain("\n");
        out.control(kToolResponseOpen);
        out.plain("\n" + content + "\n");
        out.control(kToolResponseClose);
        if (i + 1 == ms.size() || ms[i + 1].role != Role::Tool) {
          out.control(kImEnd);
          out.plain("\n");
        }
        break;
      }
      case Role::LatestReminder:
        fail("messages[{}]: role latest_reminder has no ChatML form", i);
    }
  }
  if (!open_assistant) {
    out.control(kImStart);
    out.plain("assistant\n");
    out.control(kThinkOpen);
    if (opts.thinking == ThinkingMode::None) {
      out.plain("\n\n");
      out.control(kThinkClose);
      out.plain("\n\n");
    } else {
      out.plain("\n");
    }
  }
  return out;
}

ChatFormat chat_format_for_architecture(std::string_view architecture) {
  return architecture == "qwen35moe" ? ChatFormat::ChatML : ChatFormat::DeepSeekV4;
}

ChatmlTemplate chatml_template_for(std::string_view chat_template) {
  // Qwen3.5: `args_value | tojson | safe if args_value is mapping or (...) else args_value | string`;
  // Qwen3.6: `args_value | string if args_value is string else args_value | tojson | safe`.
  return chat_template.find("else args_value | string") != std::string_view::npos ? ChatmlTemplate::Qwen35
                                                                                   : ChatmlTemplate::Qwen36;
}

std::string render_chatml(const Conversation& conv, const RenderOptions& opts) {
  return render_chatml_marked(conv, opts).text;
}

}  // namespace ds4::chat
