#pragma once
// What the agent loop reports while it works; the terminal UI and the JSON-lines writer
// implement it (ui.h). Every method has an empty default.
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/model_side.h"
#include "agent/tools.h"
#include "chat/conversation.h"

namespace ds4::agent {

enum class Outcome { Answered, TurnLimit, Cancelled, ContextFull, Error };
const char* to_string(Outcome o);

struct TurnReport {
  int turn = 0;  // model turn within this run, from 1
  GenStats gen;
  int64_t n_past = 0;
  int tool_calls = 0;
  std::string parse_error;  // malformed DSML: what the parser said
};

struct RunReport {
  Outcome outcome = Outcome::Answered;
  int turns = 0;
  int64_t evaluated = 0, reused = 0, replayed = 0, generated = 0;
  double prefill_s = 0, generate_s = 0;
  std::string error;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void prefill_progress(int64_t done, int64_t total) {}
  // `resynced`: the history had to be re-tokenized (the rendering diverged from it).
  virtual void prefill(const PrefillStats& s, bool resynced) {}
  virtual void reasoning(std::string_view text) {}
  virtual void text(std::string_view text) {}
  virtual void tool_call(const chat::ToolCall& call) {}
  virtual void diff(std::string_view diff) {}
  virtual void confirm_asked(std::string_view question) {}
  virtual void confirm_answer(Answer a) {}
  virtual void command_started(std::string_view command) {}
  virtual void tool_result(const chat::ToolCall& call, const ToolOutcome& r) {}
  virtual void turn_end(const TurnReport& t) {}
  virtual void run_end(const RunReport& r) {}
  virtual void notice(std::string_view text) {}
};

}  // namespace ds4::agent
