#include "chat/openai_parse.h"

#include "chat/json_limits.h"
#include "core/error.h"

#include <fmt/format.h>

namespace ds4::chat {

const char* json_type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

namespace {

const std::string& want_string(const Json& j, const std::string& path) {
  if (!j.is_string()) fail("{}: expected a string, got {}", path, json_type_name(j));
  return j.get_ref<const std::string&>();
}

Role parse_role(const Json& j, const std::string& path) {
  const std::string& r = want_string(j, path);
  if (r == "system") return Role::System;
  if (r == "developer") return Role::Developer;
  if (r == "user") return Role::User;
  if (r == "assistant") return Role::Assistant;
  if (r == "tool") return Role::Tool;
  if (r == "latest_reminder") return Role::LatestReminder;
  fail("{}: unknown role '{}'", path, r);
}

Task parse_task(const Json& j, const std::string& path) {
  const std::string& t = want_string(j, path);
  if (t == "action") return Task::Action;
  if (t == "query") return Task::Query;
  if (t == "authority") return Task::Authority;
  if (t == "domain") return Task::Domain;
  if (t == "title") return Task::Title;
  if (t == "read_url") return Task::ReadUrl;
  fail("{}: unknown task '{}'", path, t);
}

std::vector<ContentPart> parse_parts(const Json& arr, const std::string& path) {
  std::vector<ContentPart> parts;
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    const Json& part = arr[i];
    if (!part.is_object()) fail("{}: expected an object, got {}", p, json_type_name(part));
    auto type = part.find("type");
    if (type == part.end()) fail("{}.type: missing", p);
    ContentPart cp;
    cp.type = want_string(*type, p + ".type");
    if (cp.type == "text") {
      auto text = part.find("text");
      if (text == part.end()) fail("{}.text: missing", p);
      cp.text = want_string(*text, p + ".text");
    }
    parts.push_back(std::move(cp));
  }
  return parts;
}

ToolCall parse_tool_call(const Json& j, const std::string& path, const ParseOptions& opts) {
  if (!j.is_object()) fail("{}: expected an object, got {}", path, json_type_name(j));
  ToolCall tc;
  if (auto id = j.find("id"); id != j.end() && !id->is_null()) {
    tc.id = want_string(*id, path + ".id");
  }
  auto fn = j.find("function");
  if (fn == j.end()) fail("{}.function: missing", path);
  std::string fpath = path + ".function";
  if (!fn->is_object()) fail("{}: expected an object, got {}", fpath, json_type_name(*fn));
  auto name = fn->find("name");
  if (name == fn->end()) fail("{}.name: missing", fpath);
  tc.name = want_string(*name, fpath + ".name");
  if (tc.name.empty()) fail("{}.name: empty", fpath);
  auto args = fn->find("arguments");
  std::string apath = fpath + ".arguments";
  if (args == fn->end()) fail("{}: missing", apath);
  if (args->is_object()) {
    tc.arguments = *args;
    tc.arguments_text = args->dump();
    return tc;
  }
  const std::string& text = want_string(*args, apath);
  tc.arguments_text = text;
  if (auto e = json_limit_error(text)) fail("{}: {}", apath, *e);
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    if (!opts.lenient_arguments) {
      if (parsed.is_discarded()) fail("{}: not valid JSON", apath);
      fail("{}: expected a JSON object, got {}", apath, json_type_name(parsed));
    }
    tc.arguments_valid = false;
    tc.arguments = Json::object();
    return tc;
  }
  tc.arguments = std::move(parsed);
  return tc;
}

Message parse_message(const Json& j, const std::string& path, const ParseOptions& opts) {
  if (!j.is_object()) fail("{}: expected an object, got {}", path, json_type_name(j));
  Message m;
  auto role = j.find("role");
  if (role == j.end()) fail("{}.role: missing", path);
  m.role = parse_role(*role, path + ".role");

  if (auto c = j.find("content"); c != j.end()) {
    std::string cpath = path + ".content";
    if (c->is_string()) {
      m.content = c->get<std::string>();
    } else if (c->is_array()) {
      std::vector<ContentPart> parts = parse_parts(*c, cpath);
      if (m.role == Role::Tool) {
        m.content_parts = std::move(parts);
      } else {
        // Text parts concatenate; the official encoder has no other part kinds here.
        std::string joined;
        for (size_t i = 0; i < parts.size(); ++i) {
          if (parts[i].type != "text") {
            fail("{}[{}]: unsupported content part type '{}'", cpath, i, parts[i].type);
          }
          joined += parts[i].text;
        }
        m.content = std::move(joined);
      }
    } else if (!c->is_null()) {
      fail("{}: expected a string, an array or null, got {}", cpath, json_type_name(*c));
    }
  }
  // The official encoder cannot render these without content (it would crash or print
  // Python's "None").
  if (!m.content && !m.content_parts &&
      (m.role == Role::User || m.role == Role::Tool || m.role == Role::LatestReminder)) {
    fail("{}.content: missing or null", path);
  }
  if (m.role == Role::Developer && m.content.value_or("").empty()) {
    fail("{}.content: developer messages need non-empty content", path);
  }

  if (auto r = j.find("reasoning_content"); r != j.end() && !r->is_null()) {
    m.reasoning_content = want_string(*r, path + ".reasoning_content");
  }
  if (auto tcs = j.find("tool_calls"); tcs != j.end() && !tcs->is_null()) {
    std::string tpath = path + ".tool_calls";
    if (!tcs->is_array()) fail("{}: expected an array, got {}", tpath, json_type_name(*tcs));
    if (m.role != Role::Assistant && !tcs->empty()) {
      fail("{}: only assistant messages carry tool calls", tpath);
    }
    for (size_t i = 0; i < tcs->size(); ++i) {
      m.tool_calls.push_back(parse_tool_call((*tcs)[i], fmt::format("{}[{}]", tpath, i), opts));
    }
  }
  if (auto id = j.find("tool_call_id"); id != j.end() && !id->is_null()) {
    m.tool_call_id = want_string(*id, path + ".tool_call_id");
  }
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    m.tools = parse_tools(*t, path + ".tools");
  }
  if (auto rf = j.find("response_format"); rf != j.end() && !rf->is_null()) {
    m.response_format = *rf;
  }
  if (auto t = j.find("task"); t != j.end() && !t->is_null()) {
    if (m.role != Role::User) fail("{}.task: only user messages carry a task", path);
    m.task = parse_task(*t, path + ".task");
  }
  if (auto w = j.find("wo_eos"); w != j.end() && !w->is_null()) {
    if (!w->is_boolean()) fail("{}.wo_eos: expected a boolean, got {}", path, json_type_name(*w));
    m.no_eos = w->get<bool>();
  }
  return m;
}

}  // namespace

std::vector<Json> parse_tools(const Json& tools, std::string_view path) {
  if (!tools.is_array()) fail("{}: expected an array, got {}", path, json_type_name(tools));
  std::vector<Json> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string p = fmt::format("{}[{}]", path, i);
    const Json& t = tools[i];
    if (!t.is_object()) fail("{}: expected an object, got {}", p, json_type_name(t));
    auto fn = t.find("function");
    if (fn == t.end()) fail("{}.function: missing", p);
    if (!fn->is_object()) fail("{}.function: expected an object, got {}", p, json_type_name(*fn));
    auto name = fn->find("name");
    if (name == fn->end()) fail("{}.function.name: missing", p);
    want_string(*name, p + ".function.name");
    out.push_back(*fn);
  }
  return out;
}

Conversation parse_messages(const Json& messages, const ParseOptions& opts) {
  if (!messages.is_array()) fail("messages: expected an array, got {}", json_type_name(messages));
  Conversation conv;
  for (size_t i = 0; i < messages.size(); ++i) {
    conv.messages.push_back(parse_message(messages[i], fmt::format("messages[{}]", i), opts));
  }
  return conv;
}

Conversation parse_chat_request(const Json& request, const ParseOptions& opts) {
  if (!request.is_object()) fail("request: expected an object, got {}", json_type_name(request));
  auto msgs = request.find("messages");
  if (msgs == request.end()) fail("messages: missing");
  Conversation conv = parse_messages(*msgs, opts);
  if (auto t = request.find("tools"); t != request.end() && !t->is_null()) {
    std::vector<Json> tools = parse_tools(*t, "tools");
    if (!tools.empty()) {
      if (conv.messages.empty() || conv.messages[0].role != Role::System) {
        Message sys;
        sys.role = Role::System;
        sys.content = "";
        conv.messages.insert(conv.messages.begin(), std::move(sys));
      }
      auto& dst = conv.messages[0].tools;
      dst.insert(dst.end(), tools.begin(), tools.end());
    }
  }
  return conv;
}

Conversation parse_chat_request_text(std::string_view json_text, const ParseOptions& opts) {
  if (auto e = json_limit_error(json_text)) fail("request: {}", *e);
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    fail("request: not valid JSON (byte {})", e.byte);
  } catch (const Json::exception&) {
    fail("request: not valid JSON (a number out of range)");
  }
  return parse_chat_request(j, opts);
}

}  // namespace ds4::chat
