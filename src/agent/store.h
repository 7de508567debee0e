#pragma once
// Saved agent sessions, one directory each under the store (default ~/.ds4/agent/<id>/):
//   payload.ds4s       the model state (tokens + KV, docs/FORMATS.md "Session payload");
//                      absent once stripped
//   history.txt        the exact text whose tokens the payload holds
//   conversation.json  the messages (assistant turns with their sampled DSML blocks, which is
//                      the tool-call-id -> block map), thinking mode, model id, workdir, title
// A session with its payload resumes without evaluating anything; a stripped one re-evaluates
// its text once.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "chat/conversation.h"

namespace ds4::agent {

class ModelSide;

struct SessionInfo {
  std::string id;
  std::string title;
  std::string model_id, model_name;
  std::string workdir;
  std::string thinking;  // none | high | max
  int64_t n_tokens = 0;
  int64_t updated = 0;   // unix seconds
  bool has_payload = false;
};

struct SavedSession {
  SessionInfo info;
  chat::Conversation conv;
  std::string history;
  std::filesystem::path payload;  // empty when stripped
};

class SessionStore {
 public:
  explicit SessionStore(std::filesystem::path dir);
  // ~/.ds4/agent ($HOME), or ./.ds4/agent without HOME.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const { return dir_; }
  std::string new_id() const;  // yyyymmdd-hhmmss-xxxx (UTC)

  // Writes the session (payload via the model, then text and conversation); replaces an
  // earlier save of the same id. Throws ds4::Error naming the path on failure.
  void save(const SessionInfo& info, const chat::Conversation& conv, const ModelSide& model);
  SavedSession load(const std::string& id) const;
  std::vector<SessionInfo> list() const;  // most recently updated first
  void remove(const std::string& id);
  void strip(const std::string& id);      // drops the payload, keeps the text

  // An exact id or an unambiguous prefix; "last": the most recently updated session.
  std::string resolve(const std::string& id_or_prefix) const;

 private:
  std::filesystem::path dir_;
};

chat::Json message_to_json(const chat::Message& m);
chat::Message message_from_json(const chat::Json& j, const std::string& where);
std::string thinking_name(chat::ThinkingMode m);
chat::ThinkingMode thinking_from_name(const std::string& s);

}  // namespace ds4::agent
