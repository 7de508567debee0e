// OpenAI /v1/responses request bodies: `input` items → chat messages (then the chat module's
// parser), `instructions` → a leading system message, function tools → chat tools.
#include <fmt/format.h>

#include "chat/openai_parse.h"
#include "server/request_common.h"

namespace ds4::server {

using chat::Json;
using namespace detail;

namespace {

// Text of a message's content: a string, or parts of type input_text / output_text / text.
std::string content_text(const Json& c, const std::string& path) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(path, fmt::format("expected a string or an array, got {}", type_name(c)));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    const Json& part = c[i];
    if (!part.is_object()) bad(p, fmt::format("expected an object, got {}", type_name(part)));
    auto type = opt_string(part, "type");
    if (!type) bad(p + ".type", "missing");
    if (*type != "input_text" && *type != "output_text" && *type != "text" && *type != "summary_text" &&
        *type != "reasoning_text") {
      bad(p + ".type", fmt::format("unsupported content type '{}'", *type));
    }
    const Json* text = field(part, "text");
    if (!text || !text->is_string()) bad(p + ".text", "expected a string");
    out += text->get<std::string>();
  }
  return out;
}

class MessageBuilder {
 public:
  Json messages = Json::array();

  void system(const std::string& text) { messages.push_back(Json{{"role", "system"}, {"content", text}}); }
  void message(const std::string& role, std::string text) {
    if (role == "assistant") {
      Json& a = open_assistant();
      a["content"] = a["content"].is_string() ? Json(a["content"].get<std::string>() + text) : Json(text);
      return;
    }
    close();
    messages.push_back(Json{{"role", role}, {"content", std::move(text)}});
  }
  void reasoning(std::string text) {
    Json& a = open_assistant();
    a["reasoning_content"] = std::move(text);
  }
  void function_call(Json call) {
    Json& a = open_assistant();
    if (!a.contains("tool_calls")) a["tool_calls"] = Json::array();
    a["tool_calls"].push_back(std::move(call));
  }
  void tool_output(const std::string& call_id, std::string output) {
    close();
    messages.push_back(Json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(output)}});
  }
  void close() { assistant_open_ = false; }

 private:
  Json& open_assistant() {
    if (!assistant_open_) {
      messages.push_back(Json{{"role", "assistant"}, {"content", nullptr}});
      assistant_open_ = true;
    }
    return messages.back();
  }
  bool assistant_open_ = false;
};

void parse_item(const Json& item, const std::string& p, MessageBuilder& mb) {
  if (!item.is_object()) bad(p, fmt::format("expected an object, got {}", type_name(item)));
  auto type = opt_string(item, "type").value_or("message");
  if (type == "message") {
    auto role = opt_string(item, "role");
    if (!role) bad(p + ".role", "missing");
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer") {
      bad(p + ".role", fmt::format("unknown role '{}'", *role));
    }
    const Json* c = field(item, "content");
    if (!c) bad(p + ".content", "missing");
    mb.message(*role, content_text(*c, p + ".content"));
  } else if (type == "function_call") {
    auto call_id = opt_string(item, "call_id");
    auto name = opt_string(item, "name");
    auto args = opt_string(item, "arguments");
    if (!call_id) bad(p + ".call_id", "missing");
    if (!name || name->empty()) bad(p + ".name", "missing");
    if (!args) bad(p + ".arguments", "missing");
    mb.function_call(Json{{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *args}}}});
  } else if (type == "function_call_output") {
    auto call_id = opt_string(item, "call_id");
    if (!call_id) bad(p + ".call_id", "missing");
    const Json* out = field(item, "output");
    if (!out) bad(p + ".output", "missing");
    mb.tool_output(*call_id, content_text(*out, p + ".output"));
  } else if (type == "reasoning") {
    std::string text;
    if (const Json* c = field(item, "content")) text = content_text(*c, p + ".content");
    if (text.empty()) {
      if (const Json* s = field(item, "summary")) text = content_text(*s, p + ".summary");
    }
    mb.reasoning(std::move(text));
  } else {
    bad(p + ".type", fmt::format("unsupported input item type '{}'", type));
  }
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) bad("tools", fmt::format("expected an array, got {}", type_name(tools)));
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string p = fmt::format("tools[{}]", i);
    const Json& t = tools[i];
    if (!t.is_object()) bad(p, fmt::format("expected an object, got {}", type_name(t)));
    auto type = opt_string(t, "type");
    if (!type) bad(p + ".type", "missing");
    if (*type != "function") continue;  // hosted tools (web_search, ...) do not exist here
    auto name = opt_string(t, "name");
    if (!name || name->empty()) bad(p + ".name", "missing");
    Json fn = Json::object();
    fn["name"] = *name;
    if (auto d = opt_string(t, "description")) fn["description"] = *d;
    if (const Json* params = field(t, "parameters")) {
      if (!params->is_object()) bad(p + ".parameters", fmt::format("expected an object, got {}", type_name(*params)));
      fn["parameters"] = *params;
    }
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

}  // namespace

GenRequest parse_responses(const Json& body, const ParseContext& ctx) {
  require_object(body);
  GenRequest r;
  r.api = ApiKind::Responses;
  r.model = check_model(body, ctx);
  r.stream = opt_bool(body, "stream").value_or(false);
  parse_sampling(body, r);
  parse_thinking(body, ctx, r.model, r);
  r.max_tokens = opt_int(body, "max_output_tokens", 1, int64_t{1} << 40).value_or(ctx.default_max_tokens);
  if (field(body, "previous_response_id")) {
    bad("previous_response_id", "not supported: this server is stateless, send the whole input");
  }
  if (auto lp = opt_int(body, "top_logprobs", 0, 20)) r.top_logprobs = static_cast<int32_t>(*lp);

  MessageBuilder mb;
  if (auto instr = opt_string(body, "instructions"); instr && !instr->empty()) mb.system(*instr);
  const Json* input = field(body, "input");
  if (!input) bad("input", "missing");
  if (input->is_string()) {
    mb.message("user", input->get<std::string>());
  } else if (input->is_array()) {
    if (input->empty()) bad("input", "must contain at least one item");
    for (size_t i = 0; i < input->size(); ++i) parse_item((*input)[i], fmt::format("input[{}]", i), mb);
  } else {
    bad("input", fmt::format("expected a string or an array, got {}", type_name(*input)));
  }
  Json chat_req = Json::object();
  chat_req["messages"] = std::move(mb.messages);
  bool allow_tools = tool_choice_allows_tools(body);
  if (const Json* tools = field(body, "tools")) {
    Json converted = convert_tools(*tools);
    if (allow_tools && !converted.empty()) chat_req["tools"] = std::move(converted);
  }
  r.tools_enabled = chat_req.contains("tools");
  try {
    r.conversation = chat::parse_chat_request(chat_req);
  } catch (const std::exception& e) {
    throw ApiError(400, fmt::format("input: {}", client_message(e)), "input");
  }
  fold_late_system_turns(*r.conversation);
  attach_tool_blocks(*r.conversation, ctx);
  return r;
}

}  // namespace ds4::server
