// Flags of the generation modes (chat_cli.h).
#include "chat_cli.h"

namespace ds4::tools {

void add_chat_flags(CLI::App& app, ChatCliOptions& o) {
  auto* g = app.add_option_group("Generation");
  g->add_option_function<std::string>(
      "-p,--prompt",
      [&o](const std::string& s) {
        o.prompt = s;
        o.prompt_given = true;
      },
      "prompt; without -p/--prompt-file ds4 starts an interactive chat");
  g->add_option("--prompt-file", o.prompt_file, "read the prompt from a file");
  g->add_option("--system", o.system, "system prompt");
  g->add_option("-n", o.n_predict, "tokens to generate (default: until end of turn or full context)");
  g->add_option("-c,--ctx", o.ctx, "context size in tokens (default: the model's training context)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--temp", o.temperature, "sampling temperature; 0 = greedy (default 1)");
  g->add_option("--top-k", o.top_k, "keep the k most likely tokens; 0 = off (default 0)");
  g->add_option("--top-p", o.top_p, "nucleus sampling mass in [0,1]; 1 = off (default 1)");
  g->add_option("--min-p", o.min_p, "drop tokens below min_p x p(top) (default 0.05)");
  g->add_option("--seed", o.seed, "sampling seed (default: random)");
  g->add_flag_callback("--nothink", [&o] { o.think = "none"; }, "answer directly, no reasoning");
  g->add_flag_callback("--think", [&o] { o.think = "high"; }, "reason before answering (default)");
  g->add_flag_callback("--think-max", [&o] { o.think = "max"; },
                       "maximum reasoning effort (needs --ctx >= 393216, else behaves as --think)");
  g->add_flag("--raw", o.raw, "no chat template: the prompt is the model input as is (specials recognized; BOS prepended when missing)");
  g->add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-turn tokens");
  g->add_flag("--dump-tokens", o.dump_tokens, "print the prompt's token ids and pieces, then exit");
  g->add_option("--dump-logprobs", o.dump_logprobs, "write each generated token's top logprobs as JSON to FILE");
  g->add_option("--logprobs-top-k", o.logprobs_top_k, "alternatives per step in --dump-logprobs (default 20)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--trace", o.trace, "append evaluation / generation events (JSON lines) to FILE");
  g->add_flag("--no-stats", o.no_stats, "do not print the statistics line after each answer");
  auto* k = app.add_option_group("Disk KV cache");
  k->add_option("--kv-disk-dir,--kv-cache-dir", o.kv_disk_dir,
                "reuse prompt prefixes saved in DIR; the chat resumes its last conversation after a restart");
  k->add_option("--kv-disk-space-mb,--kv-cache-budget", o.kv_disk_space_mb, "disk budget in MB (default 4096)")
      ->check(CLI::PositiveNumber);
  k->add_option("--kv-cache-min-tokens", o.kv_cache_min_tokens, "do not save or load prefixes shorter than N (default 512)")
      ->check(CLI::PositiveNumber);
}

}  // namespace ds4::tools
