#include "agent/script_model.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "chat/markers.h"
#include "core/error.h"

namespace ds4::agent {

std::vector<ScriptRule> load_script(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--debug-script {}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) fail("--debug-script {}: not valid JSON", path);
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    fail("--debug-script {}: expected {{\"rules\": [...]}}", path);
  std::vector<ScriptRule> rules;
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const auto& r = j["rules"][i];
    if (!r.is_object() || !r.contains("when") || !r["when"].is_string() || !r.contains("text") ||
        !r["text"].is_string())
      fail("--debug-script {}: rules[{}]: expected {{\"when\": string, \"text\": string}}", path, i);
    rules.push_back({r["when"].get<std::string>(), r["text"].get<std::string>()});
  }
  return rules;
}

GenStats ScriptModel::generate(const GenParams& params, const PieceFn& on_piece) {
  const std::string& h = inner_.text();
  // The last user turn of either prompt format (DeepSeek V4 or ChatML).
  size_t last_user = h.rfind(chat::mark::kUser);
  const size_t chatml_user = h.rfind("<|im_start|>user");
  if (chatml_user != std::string::npos && (last_user == std::string::npos || chatml_user > last_user)) last_user = chatml_user;
  const std::string_view tail = last_user == std::string::npos ? std::string_view(h) : std::string_view(h).substr(last_user);
  for (const auto& r : rules_) {
    if (tail.find(r.when) != std::string_view::npos) return inner_.generate_forced(r.text, params, on_piece);
  }
  return inner_.generate(params, on_piece);
}

}  // namespace ds4::agent
