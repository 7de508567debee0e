#pragma once
// ds4-agent as a program: options (tools/ds4-agent parses the flags into AgentCliOptions),
// engine and model set-up, the saved-session commands, the one-shot mode (-p) and the
// interactive REPL (repl.cpp).
//
// Exit status of run_agent_cli: 0 the model finished (answered without a tool call), 1 an
// error (bad flags, model failure, full context), 2 the turn limit was hit, 130 interrupted.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ds4 {
struct EngineOptions;
}

namespace ds4::agent {

struct AgentCliOptions {
  std::string model_path = "ds4flash.gguf";
  std::string backend = "cpu";
  int threads = 0;
  int64_t batch = 0;  // EngineOptions::max_batch (0: the backend's default)
  std::string dir_steering_file;  // EngineOptions::dir_steering_*
  float dir_steering_attn = 0, dir_steering_ffn = 0;
  // Further engine settings from the command line (expert streaming, residency), applied to
  // the EngineOptions before the engine opens; may be empty.
  std::function<void(EngineOptions&)> configure_engine;
  int64_t ctx = 0;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.05f;
  std::optional<uint64_t> seed;
  std::string think = "high";  // none | high | max
  int64_t n_predict = -1;      // tokens per model turn

  std::string prompt;          // -p
  bool prompt_given = false;
  bool yes = false;
  int max_turns = 50;
  bool json = false;
  std::string workdir;         // default: the current directory
  std::optional<std::string> resume;  // --resume [ID]: "last" without an ID
  bool save = false;           // -p: save the session at the end
  std::string sessions_dir;    // default ~/.ds4/agent
  std::string trace;           // JSON-lines events appended to this file
  bool no_color = false;
  std::string debug_script;    // TEST SCAFFOLDING: scripted model (script_model.h)
};

int run_agent_cli(const AgentCliOptions& o);

}  // namespace ds4::agent
