#pragma once
// Front ends of the agent's events: the terminal (streamed answer, thinking dimmed, tool calls
// with their arguments, diffs, prefill progress) and JSON lines (--json, --trace), plus the
// confirmation prompt and the Ctrl+C flag.
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "agent/events.h"
#include "agent/tools.h"

namespace ds4::agent {

// Ctrl+C sets interrupt_flag() while installed (no SA_RESTART, so a blocking read returns).
std::atomic<bool>& interrupt_flag();
void install_interrupt_handler();
void restore_default_interrupt();

class TerminalUi final : public EventSink {
 public:
  // `color`: ANSI styling (stdout is a terminal and --no-color was not given).
  TerminalUi(std::FILE* out, std::FILE* err, bool color, bool progress);
  void prefill_progress(int64_t done, int64_t total) override;
  void prefill(const PrefillStats& s, bool resynced) override;
  void reasoning(std::string_view text) override;
  void text(std::string_view text) override;
  void tool_call(const chat::ToolCall& call) override;
  void diff(std::string_view diff) override;
  void command_started(std::string_view command) override;
  void tool_result(const chat::ToolCall& call, const ToolOutcome& r) override;
  void turn_end(const TurnReport& t) override;
  void run_end(const RunReport& r) override;
  void notice(std::string_view text) override;

 private:
  void put(std::string_view s, const char* style = nullptr);
  void newline_if_needed();
  std::FILE* out_;
  std::FILE* err_;
  bool color_, progress_;
  bool at_line_start_ = true;
  bool progress_shown_ = false;
  bool reasoning_open_ = false;
};

// One JSON object per line: {"event": "...", ...}. Streamed text is joined into whole UTF-8
// characters first.
class JsonLines final : public EventSink {
 public:
  explicit JsonLines(std::FILE* out) : out_(out) {}
  void prefill(const PrefillStats& s, bool resynced) override;
  void reasoning(std::string_view text) override;
  void text(std::string_view text) override;
  void tool_call(const chat::ToolCall& call) override;
  void diff(std::string_view diff) override;
  void confirm_asked(std::string_view question) override;
  void confirm_answer(Answer a) override;
  void command_started(std::string_view command) override;
  void tool_result(const chat::ToolCall& call, const ToolOutcome& r) override;
  void turn_end(const TurnReport& t) override;
  void run_end(const RunReport& r) override;
  void notice(std::string_view text) override;
  void emit(const chat::Json& j);

 private:
  void stream(const char* kind, std::string_view text);
  void flush_stream();
  std::FILE* out_;
  std::string kind_, pending_;
};

// Sends every event to each sink in order.
class Tee final : public EventSink {
 public:
  explicit Tee(std::vector<EventSink*> sinks) : s_(std::move(sinks)) {}
  void prefill_progress(int64_t d, int64_t t) override { for (auto* s : s_) s->prefill_progress(d, t); }
  void prefill(const PrefillStats& st, bool r) override { for (auto* s : s_) s->prefill(st, r); }
  void reasoning(std::string_view t) override { for (auto* s : s_) s->reasoning(t); }
  void text(std::string_view t) override { for (auto* s : s_) s->text(t); }
  void tool_call(const chat::ToolCall& c) override { for (auto* s : s_) s->tool_call(c); }
  void diff(std::string_view d) override { for (auto* s : s_) s->diff(d); }
  void confirm_asked(std::string_view q) override { for (auto* s : s_) s->confirm_asked(q); }
  void confirm_answer(Answer a) override { for (auto* s : s_) s->confirm_answer(a); }
  void command_started(std::string_view c) override { for (auto* s : s_) s->command_started(c); }
  void tool_result(const chat::ToolCall& c, const ToolOutcome& r) override { for (auto* s : s_) s->tool_result(c, r); }
  void turn_end(const TurnReport& t) override { for (auto* s : s_) s->turn_end(t); }
  void run_end(const RunReport& r) override { for (auto* s : s_) s->run_end(r); }
  void notice(std::string_view t) override { for (auto* s : s_) s->notice(t); }

 private:
  std::vector<EventSink*> s_;
};

// Confirmation on stdin: the question goes to stderr as "QUESTION [y/n/a] "; the answer is one
// line (y/yes, n/no, a/always; anything else asks again; end of input or Ctrl+C: no).
class StdinHost final : public ToolHost {
 public:
  StdinHost(EventSink& sink, bool tty) : sink_(sink), tty_(tty) {}
  Answer confirm(const std::string& question) override;
  void show_diff(const std::string& diff) override { sink_.diff(diff); }
  void command_started(const std::string& command) override { sink_.command_started(command); }

 private:
  EventSink& sink_;
  bool tty_;
};

// Reads one line from stdin: on a terminal with read(2) (so Ctrl+C interrupts it), otherwise
// through std::cin. False at end of input or when interrupted.
bool read_stdin_line(bool tty, std::string& out);

}  // namespace ds4::agent
