#pragma once
// One conversation on one Session: builds each turn's model input, streams the answer,
// reports statistics. Turns only append text to what the session already holds: the first
// turn is chat::render_prompt's output; later turns append what render_prompt would write
// for the whole conversation after the previous answer (with earlier reasoning kept,
// drop_thinking = false, the V4 format is append-only), so each turn prefills just the new
// tokens. tests/integration/cli checks the result against render_prompt. Switching
// /think <-> /nothink mid-conversation keeps earlier turns as they were written.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "chat/conversation.h"
#include "chat_cli.h"
#include "ds4/session.h"
#include "kvdisk/store.h"

namespace ds4::tools {

struct TurnStats {
  int64_t prompt_tokens = 0;  // new tokens prefilled this turn
  int64_t reused_tokens = 0;
  int64_t from_disk = 0;      // of the reused tokens, loaded from the disk KV cache
  double prefill_s = 0;
  int64_t generated = 0;
  double generate_s = 0;
  StopReason reason = StopReason::MaxTokens;
};

// Set by the SIGINT handler while a turn runs (see install_interrupt_handler).
std::atomic<bool>& interrupt_flag();
// Ctrl+C sets interrupt_flag() instead of killing the process (until restored).
void install_interrupt_handler();
void restore_default_interrupt();

class ChatRunner {
 public:
  ChatRunner(std::shared_ptr<const Engine> engine, const ChatCliOptions& o);
  ~ChatRunner();
  ChatRunner(const ChatRunner&) = delete;
  ChatRunner& operator=(const ChatRunner&) = delete;

  // Appends a user turn (chat template) or raw text (--raw), prefills it and generates the
  // answer, streaming it to `out`.
  TurnStats turn(const std::string& user_text, std::FILE* out);

  void set_thinking(chat::ThinkingMode m) { thinking_ = m; }
  // The REPL's /steer: steering scales for the following tokens (kept by later sessions).
  void set_steering(float attn, float ffn) {
    session_->set_steering(attn, ffn);
    steer_set_ = true, steer_attn_ = attn, steer_ffn_ = ffn;
  }
  chat::ThinkingMode thinking() const { return thinking_; }
  // Replaces the session by one with context n (keeping the conversation when it fits).
  void set_ctx(int64_t n);
  void save(const std::string& path) const { session_->save(path); }
  void load(const std::string& path);
  // Disk KV cache (--kv-disk-dir): resume the conversation the REPL saved when it last exited
  // (returns its token count, 0 when there is none), save the current one on exit, start over.
  int64_t resume_from_disk();
  void save_on_exit();
  void start_over();
  bool has_disk_cache() const { return store_ != nullptr; }
  Session& session() { return *session_; }
  // Model input of the next turn for `user_text` (what turn() would append), as tokens.
  std::vector<int32_t> next_input(const std::string& user_text) const;
  void print_stats(const TurnStats& s) const;
  bool reasoning_open(const std::vector<int32_t>& tokens) const;
  // The model family speaks ChatML (qwen35moe) rather than the DeepSeek V4 format; decided by
  // chat::chat_format_for_architecture, as in ds4-server and ds4-agent.
  bool chatml() const;
  // One JSON object per line to the --trace file (no-op without --trace).
  void trace(const std::string& json_line) const;

 private:
  std::shared_ptr<const Engine> engine_;
  ChatCliOptions o_;
  std::unique_ptr<Session> session_;
  chat::ThinkingMode thinking_;
  std::FILE* trace_ = nullptr;
  std::unique_ptr<kvdisk::Store> store_;
  SamplerConfig sampler_config_;
  bool steer_set_ = false;  // /steer was used: new sessions take these scales
  float steer_attn_ = 0, steer_ffn_ = 0;
  std::unique_ptr<Session> new_session(int64_t n_ctx) const;
  void disk_save(kvdisk::SaveReason reason);
  int64_t disk_load(const std::vector<int32_t>& input);

 public:
  // --dump-logprobs: one entry per generated token of every turn.
  struct LogprobStep {
    GeneratedToken token;
  };
  std::vector<LogprobStep> logprob_steps;
};

chat::ThinkingMode parse_thinking(const std::string& s);
std::string format_stats(const TurnStats& s);

}  // namespace ds4::tools
