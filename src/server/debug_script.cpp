#include "server/debug_script.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "chat/markers.h"
#include "core/error.h"

namespace ds4::server {

DebugScript DebugScript::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open debug script", path);
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) fail("{}: not valid JSON", path);
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array()) fail("{}: expected {{\"rules\": [...]}}", path);
  DebugScript s;
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const auto& r = j["rules"][i];
    if (!r.is_object() || !r.contains("when") || !r["when"].is_string() || !r.contains("text") ||
        !r["text"].is_string()) {
      fail("{}: rules[{}]: expected {{\"when\": string, \"text\": string}}", path, i);
    }
    std::optional<std::string> reasoning;
    if (r.contains("reasoning")) {
      if (!r["reasoning"].is_string()) fail("{}: rules[{}].reasoning: expected a string", path, i);
      reasoning = r["reasoning"].get<std::string>();
    }
    std::optional<bool> with_tools;
    if (r.contains("with_tools")) {
      if (!r["with_tools"].is_boolean()) fail("{}: rules[{}].with_tools: expected a boolean", path, i);
      with_tools = r["with_tools"].get<bool>();
    }
    int64_t delay = 0;
    if (r.contains("token_delay_ms")) {
      const auto& d = r["token_delay_ms"];
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > 10000) {
        fail("{}: rules[{}].token_delay_ms: expected an integer from 0 to 10000", path, i);
      }
      delay = d.get<int64_t>();
    }
    s.rules_.push_back({r["when"].get<std::string>(), r["text"].get<std::string>(), std::move(reasoning), with_tools, delay});
  }
  return s;
}

std::optional<std::string> DebugScript::match(std::string_view prompt_text, bool in_reasoning, bool has_tools,
                                              int64_t* token_delay_ms) const {
  // The last user turn of either prompt format (DeepSeek V4 or ChatML).
  size_t last_user = prompt_text.rfind(chat::mark::kUser);
  const size_t chatml_user = prompt_text.rfind("<|im_start|>user");
  if (chatml_user != std::string_view::npos && (last_user == std::string_view::npos || chatml_user > last_user))
    last_user = chatml_user;
  std::string_view tail = last_user == std::string_view::npos ? prompt_text : prompt_text.substr(last_user);
  for (const auto& r : rules_) {
    if (tail.find(r.when) == std::string_view::npos) continue;
    if (r.with_tools && *r.with_tools != has_tools) continue;
    if (token_delay_ms) *token_delay_ms = r.token_delay_ms;
    if (r.reasoning && in_reasoning) return *r.reasoning + std::string(chat::mark::kThinkClose) + r.text;
    return r.text;
  }
  return std::nullopt;
}

}  // namespace ds4::server
