#pragma once
// The generation side of the ds4 CLI: one-shot prompts (-p / --prompt-file), --dump-tokens,
// --dump-logprobs and the interactive chat (no prompt given). Flag names follow antirez/ds4
// where it has them.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "options.h"

namespace ds4::tools {

struct ChatCliOptions {
  std::string prompt;        // -p
  bool prompt_given = false; // -p was given (possibly empty)
  std::string prompt_file;   // --prompt-file
  std::string system;        // --system
  int64_t n_predict = -1;    // -n: tokens to generate; < 0 until a stop token / full context
  int64_t ctx = 0;           // --ctx; 0: the model's training context
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.05f;
  std::optional<uint64_t> seed;
  std::string think = "high";  // none | high | max (--nothink / --think / --think-max)
  bool raw = false;            // no chat template
  bool ignore_eos = false;
  bool dump_tokens = false;
  std::string dump_logprobs;
  int32_t logprobs_top_k = 20;
  std::string trace;
  bool no_stats = false;
  // Disk KV cache (src/kvdisk): prompts whose prefix is on disk skip its prefill; the REPL
  // saves its conversation on exit and resumes it on the next start (/new starts over).
  std::string kv_disk_dir;
  int64_t kv_disk_space_mb = 4096;
  int64_t kv_cache_min_tokens = 512;
};

void add_chat_flags(CLI::App& app, ChatCliOptions& o);
// Runs the mode the options select; returns the exit status. Throws ds4::Error on failure.
int run_chat_cli(const Ds4Options& common, const ChatCliOptions& o);

}  // namespace ds4::tools
