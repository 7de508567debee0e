// ds4 command-line entry point: parses flags, then dispatches to a mode. Errors print one
// message and exit non-zero.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "chat_cli.h"
#include "common/batch_flag.h"
#include "options.h"

namespace {

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const char* b = s.data() + i;
    const char* e = s.data() + j;
    while (b < e && *b == ' ') ++b;
    while (e > b && e[-1] == ' ') --e;
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (b == e || ec != std::errc() || ptr != e || v < 0)
      ds4::fail("--tokens: '{}' (item {}) is not a non-negative token id", std::string(b, e), out.size());
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4: DeepSeek V4 inference"};
  ds4::tools::Ds4Options opts;
  std::string tokens_arg, sim_arg = "on";
  ds4::tools::ChatCliOptions chat;
  opts.model_path = "ds4flash.gguf";
  app.add_option("-m,--model", opts.model_path, "GGUF model file")->capture_default_str();
  app.add_option("--backend", opts.backend, "compute backend: cpu, or cuda (a `make cuda` build)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--act-quant-sim", sim_arg, "FP8 KV / FP4 indexer rounding (spec §5.2-5.4)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("-t,--threads", opts.threads, "worker threads (0: all cores)")->check(CLI::NonNegativeNumber);
  ds4::tools::add_batch_flag(app, opts.batch);
  app.add_option("--tokens", tokens_arg, "comma-separated token ids to evaluate");
  app.add_option("--dump-logits", opts.dump_logits_path, "write f32 logits [n_tokens][n_vocab] here");
  app.add_flag("--float-acts", opts.float_acts,
               "multiply quantized weights with f32 activations instead of Q8_0/Q8_K (debugging)");
  app.add_flag("--incremental", opts.incremental, "evaluate one token at a time through the session");
  app.add_flag("-v,--verbose", opts.verbose, "print model and timing information to stderr");
  auto* xs = ds4::tools::add_expert_flags(app, opts.experts);
  xs->add_flag("--stats", opts.stats, "print expert-streaming counters at the end");
  auto* st = app.add_option_group("Directional steering");
  st->add_option("--dir-steering-file", opts.dir_steering_file,
                 "direction file from `ds4-gguf steer-build` for this model");
  st->add_option("--dir-steering-attn", opts.dir_steering_attn,
                 "scale A: A*v is added after the attention sublayer of each covered layer (default 0)");
  st->add_option("--dir-steering-ffn", opts.dir_steering_ffn,
                 "scale B: B*v is added after the FFN sublayer of each covered layer (default 0)");
  auto* an = app.add_option_group("Model analysis");
  an->add_option("--imatrix-out", opts.imatrix_out,
                 "collect an importance matrix (llama.cpp GGUF imatrix format) and write it here");
  an->add_option("--imatrix-data", opts.imatrix_data,
                 "offline collection over a text file or PROMPTS.jsonl (one {\"prompt\": ...} per line) in chunks");
  an->add_option("--imatrix-chunk", opts.imatrix_chunk, "tokens per chunk (each chunk starts a fresh context)")
      ->capture_default_str();
  an->add_option("--imatrix-checkpoint", opts.imatrix_checkpoint, "write the files every N chunks (0: only at the end)")
      ->capture_default_str();
  an->add_option("--imatrix-max-chunks", opts.imatrix_max_chunks, "stop after N chunks (0: all)");
  an->add_option("--expert-profile-out", opts.expert_profile_out,
                 "count per layer and expert its selections and routing-weight mass; write JSON here");
  an->add_option("--prune-mask", opts.prune_mask, "remove the experts of this mask (ds4-gguf prune) from routing");
  ds4::tools::add_chat_flags(app, chat);
  app.footer(
      "Modes: --tokens IDS --dump-logits OUT evaluates token ids and writes their logits; -p/--prompt-file\n"
      "generates an answer; --dump-tokens prints the prompt's tokens; with neither, an interactive chat\n"
      "starts (/help lists its commands).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    opts.act_quant_sim = sim_arg == "on";
    if (!opts.imatrix_data.empty()) return ds4::tools::run_collect(opts);
    if (opts.dump_logits_path.empty() && tokens_arg.empty()) return ds4::tools::run_chat_cli(opts, chat);
    if (opts.dump_logits_path.empty()) ds4::fail("--tokens needs --dump-logits OUT");
    if (!opts.dir_steering_file.empty()) ds4::fail("--dir-steering-file applies to chat and generation, not --dump-logits");
    if (!opts.imatrix_out.empty() || !opts.expert_profile_out.empty() || !opts.prune_mask.empty())
      ds4::fail("--imatrix-out, --expert-profile-out and --prune-mask apply to chat, generation and --imatrix-data");
    if (tokens_arg.empty()) ds4::fail("--dump-logits needs --tokens");
    opts.tokens = parse_token_list(tokens_arg);
    ds4::tools::run_dump_logits(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
