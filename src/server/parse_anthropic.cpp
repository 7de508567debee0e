// Anthropic /v1/messages request bodies: content blocks → chat messages (tool_result blocks
// become tool messages, tool_use blocks assistant tool calls, thinking blocks reasoning,
// system turns inside `messages` system messages where they stand).
#include <fmt/format.h>

#include "chat/openai_parse.h"
#include "server/request_common.h"

namespace ds4::server {

using chat::Json;
using namespace detail;

namespace {

std::string text_blocks(const Json& c, const std::string& path) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(path, fmt::format("expected a string or an array, got {}", type_name(c)));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    if (!c[i].is_object()) bad(p, fmt::format("expected an object, got {}", type_name(c[i])));
    auto type = opt_string(c[i], "type");
    if (!type) bad(p + ".type", "missing");
    if (*type != "text") bad(p + ".type", fmt::format("unsupported block type '{}' (only text)", *type));
    auto text = opt_string(c[i], "text");
    if (!text) bad(p + ".text", "missing");
    out += *text;
  }
  return out;
}

void user_message(const Json& content, const std::string& p, Json& messages) {
  if (content.is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad(p, fmt::format("expected a string or an array, got {}", type_name(content)));
  std::string text;
  bool any_text = false;
  for (size_t i = 0; i < content.size(); ++i) {
    std::string bp = fmt::format("{}[{}]", p, i);
    const Json& b = content[i];
    if (!b.is_object()) bad(bp, fmt::format("expected an object, got {}", type_name(b)));
    auto type = opt_string(b, "type");
    if (!type) bad(bp + ".type", "missing");
    if (*type == "text") {
      auto t = opt_string(b, "text");
      if (!t) bad(bp + ".text", "missing");
      text += *t;
      any_text = true;
    } else if (*type == "tool_result") {
      auto id = opt_string(b, "tool_use_id");
      if (!id) bad(bp + ".tool_use_id", "missing");
      std::string out;
      if (const Json* c = field(b, "content")) out = text_blocks(*c, bp + ".content");
      messages.push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(out)}});
    } else {
      bad(bp + ".type", fmt::format("unsupported block type '{}'", *type));
    }
  }
  if (any_text) messages.push_back(Json{{"role", "user"}, {"content", std::move(text)}});
}

void assistant_message(const Json& content, const std::string& p, Json& messages) {
  Json m{{"role", "assistant"}, {"content", nullptr}};
  if (content.is_string()) {
    m["content"] = content;
    messages.push_back(std::move(m));
    return;
  }
  if (!content.is_array()) bad(p, fmt::format("expected a string or an array, got {}", type_name(content)));
  std::string text, reasoning;
  bool any_text = false, any_reasoning = false;
  Json calls = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    std::string bp = fmt::format("{}[{}]", p, i);
    const Json& b = content[i];
    if (!b.is_object()) bad(bp, fmt::format("expected an object, got {}", type_name(b)));
    auto type = opt_string(b, "type");
    if (!type) bad(bp + ".type", "missing");
    if (*type == "text") {
      auto t = opt_string(b, "text");
      if (!t) bad(bp + ".text", "missing");
      text += *t;
      any_text = true;
    } else if (*type == "thinking") {
      auto t = opt_string(b, "thinking");
      if (!t) bad(bp + ".thinking", "missing");
      reasoning += *t;
      any_reasoning = true;
    } else if (*type == "redacted_thinking") {
      // Opaque data from another provider: nothing to render.
    } else if (*type == "tool_use") {
      auto id = opt_string(b, "id");
      auto name = opt_string(b, "name");
      if (!id) bad(bp + ".id", "missing");
      if (!name || name->empty()) bad(bp + ".name", "missing");
      const Json* input = field(b, "input");
      Json args = input ? *input : Json::object();
      if (!args.is_object()) bad(bp + ".input", fmt::format("expected an object, got {}", type_name(args)));
      calls.push_back(Json{{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}});
    } else {
      bad(bp + ".type", fmt::format("unsupported block type '{}'", *type));
    }
  }
  if (any_text) m["content"] = std::move(text);
  if (any_reasoning) m["reasoning_content"] = std::move(reasoning);
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  messages.push_back(std::move(m));
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) bad("tools", fmt::format("expected an array, got {}", type_name(tools)));
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string p = fmt::format("tools[{}]", i);
    const Json& t = tools[i];
    if (!t.is_object()) bad(p, fmt::format("expected an object, got {}", type_name(t)));
    auto type = opt_string(t, "type").value_or("custom");
    if (type != "custom") continue;  // Anthropic-hosted tools do not exist here
    auto name = opt_string(t, "name");
    if (!name || name->empty()) bad(p + ".name", "missing");
    Json fn = Json::object();
    fn["name"] = *name;
    if (auto d = opt_string(t, "description")) fn["description"] = *d;
    const Json* schema = field(t, "input_schema");
    if (!schema) bad(p + ".input_schema", "missing");
    if (!schema->is_object()) bad(p + ".input_schema", fmt::format("expected an object, got {}", type_name(*schema)));
    fn["parameters"] = *schema;
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

}  // namespace

GenRequest parse_messages(const Json& body, const ParseContext& ctx) {
  require_object(body);
  GenRequest r;
  r.api = ApiKind::Messages;
  r.model = check_model(body, ctx);
  r.stream = opt_bool(body, "stream").value_or(false);
  parse_sampling(body, r);
  parse_thinking(body, ctx, r.model, r);
  r.stop = parse_stop(body, "stop_sequences");
  auto mt = opt_int(body, "max_tokens", 1, int64_t{1} << 40);
  if (!mt) bad("max_tokens", "missing");
  r.max_tokens = *mt;

  Json messages = Json::array();
  if (const Json* sys = field(body, "system")) {
    messages.push_back(Json{{"role", "system"}, {"content", text_blocks(*sys, "system")}});
  }
  const Json* msgs = field(body, "messages");
  if (!msgs) bad("messages", "missing");
  if (!msgs->is_array()) bad("messages", fmt::format("expected an array, got {}", type_name(*msgs)));
  if (msgs->empty()) bad("messages", "must contain at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    std::string p = fmt::format("messages[{}]", i);
    const Json& m = (*msgs)[i];
    if (!m.is_object()) bad(p, fmt::format("expected an object, got {}", type_name(m)));
    auto role = opt_string(m, "role");
    if (!role) bad(p + ".role", "missing");
    const Json* content = field(m, "content");
    if (!content) bad(p + ".content", "missing");
    if (*role == "user") {
      user_message(*content, p + ".content", messages);
    } else if (*role == "assistant") {
      assistant_message(*content, p + ".content", messages);
    } else if (*role == "system") {
      // A system turn after the first message (Claude Code sends its environment this way). It
      // renders where it stands, as DeepSeek's encoder writes a later system message.
      messages.push_back(Json{{"role", "system"}, {"content", text_blocks(*content, p + ".content")}});
    } else {
      bad(p + ".role", fmt::format("unknown role '{}' (user, assistant, system)", *role));
    }
  }
  Json chat_req = Json::object();
  chat_req["messages"] = std::move(messages);
  bool allow_tools = tool_choice_allows_tools(body);
  if (const Json* tools = field(body, "tools")) {
    Json converted = convert_tools(*tools);
    if (allow_tools && !converted.empty()) chat_req["tools"] = std::move(converted);
  }
  r.tools_enabled = chat_req.contains("tools");
  try {
    r.conversation = chat::parse_chat_request(chat_req);
  } catch (const std::exception& e) {
    throw ApiError(400, fmt::format("messages: {}", client_message(e)), "messages");
  }
  fold_late_system_turns(*r.conversation);
  attach_tool_blocks(*r.conversation, ctx);
  return r;
}

}  // namespace ds4::server
