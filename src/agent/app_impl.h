#pragma once
// Internal to src/agent: the state of a running ds4-agent, shared by app.cpp and repl.cpp.
#include <cstdio>
#include <memory>

#include "agent/agent.h"
#include "agent/app.h"
#include "agent/engine_model.h"
#include "agent/script_model.h"
#include "agent/store.h"
#include "agent/ui.h"

namespace ds4::agent {

class App {
 public:
  explicit App(const AgentCliOptions& o);
  ~App();

  int run_once();  // -p
  int run_repl();  // repl.cpp

  // Saved sessions.
  void save();
  void resume(const std::string& id_or_last);
  void list_sessions();
  void del(const std::string& id);
  void strip(const std::string& id);
  void print_ctx();
  void new_session();

  static int exit_code(Outcome o);

 private:
  RunReport run_request(const std::string& text);

  AgentCliOptions o_;
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<EngineModel> engine_model_;
  std::unique_ptr<ScriptModel> script_model_;
  ModelSide* model_ = nullptr;
  std::unique_ptr<Workdir> wd_;
  std::unique_ptr<Tools> tools_;
  std::unique_ptr<EventSink> ui_;
  std::unique_ptr<JsonLines> trace_sink_;
  std::FILE* trace_file_ = nullptr;
  std::unique_ptr<Tee> tee_;
  EventSink* sink_ = nullptr;
  std::unique_ptr<StdinHost> host_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<SessionStore> store_;
  std::string id_;
  bool stdin_tty_ = false;
  JsonLines* json_out_ = nullptr;  // the --json sink (stdout), when given
  void event(const chat::Json& j);
  void say(const std::string& line);  // a line for the user (stdout, or a notice in --json)
};

}  // namespace ds4::agent
