#include "agent/store.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "agent/model_side.h"
#include "core/error.h"

namespace ds4::agent {

namespace fs = std::filesystem;
using chat::Json;

std::string thinking_name(chat::ThinkingMode m) {
  return m == chat::ThinkingMode::None ? "none" : m == chat::ThinkingMode::Max ? "max" : "high";
}

chat::ThinkingMode thinking_from_name(const std::string& s) {
  if (s == "none") return chat::ThinkingMode::None;
  if (s == "max") return chat::ThinkingMode::Max;
  return chat::ThinkingMode::High;
}

namespace {

const char* role_name(chat::Role r) {
  switch (r) {
    case chat::Role::System: return "system";
    case chat::Role::Developer: return "developer";
    case chat::Role::User: return "user";
    case chat::Role::Assistant: return "assistant";
    case chat::Role::Tool: return "tool";
    case chat::Role::LatestReminder: return "latest_reminder";
  }
  return "?";
}

chat::Role role_from(const std::string& s, const std::string& where) {
  if (s == "system") return chat::Role::System;
  if (s == "developer") return chat::Role::Developer;
  if (s == "user") return chat::Role::User;
  if (s == "assistant") return chat::Role::Assistant;
  if (s == "tool") return chat::Role::Tool;
  if (s == "latest_reminder") return chat::Role::LatestReminder;
  fail("{}: unknown role '{}'", where, s);
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot open", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& s) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("{}: cannot open for writing", tmp.string());
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
    f.close();
    if (!f) fail("{}: write failed", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) fail("{}: cannot rename into place: {}", p.string(), ec.message());
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Json message_to_json(const chat::Message& m) {
  Json j = Json::object();
  j["role"] = role_name(m.role);
  if (m.content) j["content"] = *m.content;
  if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
  if (!m.tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : m.tool_calls) {
      Json cj = Json::object();
      cj["id"] = c.id;
      cj["name"] = c.name;
      cj["arguments"] = c.arguments;
      if (!c.arguments_valid) {
        cj["arguments_valid"] = false;
        cj["arguments_text"] = c.arguments_text;
      }
      calls.push_back(std::move(cj));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (m.raw_tool_block) j["raw_tool_block"] = *m.raw_tool_block;
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.tools.empty()) j["tools"] = m.tools;
  if (m.no_eos) j["no_eos"] = true;
  return j;
}

chat::Message message_from_json(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("role") || !j["role"].is_string()) fail("{}: expected an object with a role", where);
  auto str = [&](const char* k) -> std::optional<std::string> {
    if (!j.contains(k)) return std::nullopt;
    if (!j[k].is_string()) fail("{}.{}: expected a string", where, k);
    return j[k].get<std::string>();
  };
  chat::Message m;
  m.role = role_from(j["role"].get<std::string>(), where + ".role");
  m.content = str("content");
  m.reasoning_content = str("reasoning_content");
  m.raw_tool_block = str("raw_tool_block");
  m.tool_call_id = str("tool_call_id").value_or("");
  if (j.contains("tool_calls")) {
    if (!j["tool_calls"].is_array()) fail("{}.tool_calls: expected an array", where);
    for (size_t i = 0; i < j["tool_calls"].size(); ++i) {
      const Json& c = j["tool_calls"][i];
      const std::string w = fmt::format("{}.tool_calls[{}]", where, i);
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("name") || !c["name"].is_string())
        fail("{}: expected {{id, name, arguments}}", w);
      chat::ToolCall tc;
      tc.id = c["id"].get<std::string>();
      tc.name = c["name"].get<std::string>();
      if (c.contains("arguments")) tc.arguments = c["arguments"];
      if (c.contains("arguments_valid") && c["arguments_valid"] == false) {
        tc.arguments_valid = false;
        tc.arguments_text = c.value("arguments_text", "");
      }
      m.tool_calls.push_back(std::move(tc));
    }
  }
  if (j.contains("tools")) {
    if (!j["tools"].is_array()) fail("{}.tools: expected an array", where);
    for (const auto& t : j["tools"]) m.tools.push_back(t);
  }
  m.no_eos = j.value("no_eos", false);
  return m;
}

SessionStore::SessionStore(fs::path dir) : dir_(std::move(dir)) {}

fs::path SessionStore::default_dir() {
  const char* home = std::getenv("HOME");
  return (home && *home ? fs::path(home) : fs::current_path()) / ".ds4" / "agent";
}

std::string SessionStore::new_id() const {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  std::random_device rd;
  return fmt::format("{}-{:04x}", buf, rd() & 0xffff);
}

void SessionStore::save(const SessionInfo& info, const chat::Conversation& conv, const ModelSide& model) {
  if (!valid_id(info.id)) fail("session id '{}': only letters, digits, '-' and '_'", info.id);
  const fs::path d = dir_ / info.id;
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) fail("{}: cannot create: {}", d.string(), ec.message());
  model.save_state((d / "payload.ds4s").string());
  write_text(d / "history.txt", model.text());
  Json j = Json::object();
  j["version"] = 1;
  j["id"] = info.id;
  j["title"] = info.title;
  j["model_id"] = model.model_id();
  j["model_name"] = model.model_name();
  j["workdir"] = info.workdir;
  j["thinking"] = info.thinking;
  j["n_tokens"] = model.n_past();
  j["updated"] = now_s();
  Json msgs = Json::array();
  for (const auto& m : conv.messages) msgs.push_back(message_to_json(m));
  j["messages"] = std::move(msgs);
  write_text(d / "conversation.json", j.dump(1, ' ', false, Json::error_handler_t::replace) + "\n");
}

namespace {

SessionInfo read_info(const fs::path& d, Json* out_json) {
  const fs::path p = d / "conversation.json";
  Json j = Json::parse(read_text(p), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", p.string());
  if (j.value("version", 0) != 1) fail("{}: unsupported version", p.string());
  SessionInfo s;
  s.id = d.filename().string();
  s.title = j.value("title", "");
  s.model_id = j.value("model_id", "");
  s.model_name = j.value("model_name", "");
  s.workdir = j.value("workdir", "");
  s.thinking = j.value("thinking", "high");
  s.n_tokens = j.value("n_tokens", int64_t{0});
  s.updated = j.value("updated", int64_t{0});
  std::error_code ec;
  s.has_payload = fs::exists(d / "payload.ds4s", ec);
  if (out_json) *out_json = std::move(j);
  return s;
}

}  // namespace

SavedSession SessionStore::load(const std::string& id) const {
  if (!valid_id(id)) fail("session id '{}': not a valid id", id);
  const fs::path d = dir_ / id;
  std::error_code ec;
  if (!fs::is_directory(d, ec)) fail("session {}: not found in {}", id, dir_.string());
  SavedSession s;
  Json j;
  s.info = read_info(d, &j);
  if (!j.contains("messages") || !j["messages"].is_array()) fail("{}: messages: expected an array", (d / "conversation.json").string());
  for (size_t i = 0; i < j["messages"].size(); ++i)
    s.conv.messages.push_back(message_from_json(j["messages"][i], fmt::format("{}: messages[{}]", (d / "conversation.json").string(), i)));
  s.history = read_text(d / "history.txt");
  if (s.info.has_payload) s.payload = d / "payload.ds4s";
  return s;
}

std::vector<SessionInfo> SessionStore::list() const {
  std::vector<SessionInfo> v;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return v;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory()) continue;
    try {
      v.push_back(read_info(it->path(), nullptr));
    } catch (const std::exception&) {
      // not a session directory (or a damaged one): not listed
    }
  }
  std::sort(v.begin(), v.end(), [](const SessionInfo& a, const SessionInfo& b) {
    return a.updated != b.updated ? a.updated > b.updated : a.id > b.id;
  });
  return v;
}

std::string SessionStore::resolve(const std::string& q) const {
  const auto all = list();
  if (q == "last") {
    if (all.empty()) fail("no saved sessions in {}", dir_.string());
    return all.front().id;
  }
  std::vector<std::string> hits;
  for (const auto& s : all) {
    if (s.id == q) return s.id;
    if (s.id.rfind(q, 0) == 0) hits.push_back(s.id);
  }
  if (hits.empty()) fail("session {}: not found in {} (/list shows them)", q, dir_.string());
  if (hits.size() > 1) fail("session {}: ambiguous ({} sessions start with it)", q, hits.size());
  return hits.front();
}

void SessionStore::remove(const std::string& id) {
  if (!valid_id(id)) fail("session id '{}': not a valid id", id);
  std::error_code ec;
  fs::remove_all(dir_ / id, ec);
  if (ec) fail("{}: cannot delete: {}", (dir_ / id).string(), ec.message());
}

void SessionStore::strip(const std::string& id) {
  if (!valid_id(id)) fail("session id '{}': not a valid id", id);
  std::error_code ec;
  fs::remove(dir_ / id / "payload.ds4s", ec);
  if (ec) fail("{}: cannot delete: {}", (dir_ / id / "payload.ds4s").string(), ec.message());
}

}  // namespace ds4::agent
