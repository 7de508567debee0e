// Generation modes: --dump-tokens, one-shot prompt (+ --dump-logprobs), interactive chat.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "chat_cli.h"
#include "chat_runner.h"
#include "core/error.h"
#include "ds4/engine.h"

namespace ds4::tools {

int run_repl(ChatRunner& runner, const ChatCliOptions& o);

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{} {}: cannot open", what, path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{} {}: read error", what, path);
  return ss.str();
}

namespace {

// Token piece for humans: printable ASCII as is, everything else as \xNN (pieces may be
// partial UTF-8 sequences, so no attempt is made to print them as text).
std::string escape_piece(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

nlohmann::json token_json(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string& piece = id < tok.n_vocab() ? tok.token_to_piece(id) : std::string();
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : piece) bytes.push_back(c);
  return {{"id", id}, {"text", escape_piece(piece)}, {"bytes", bytes}, {"logprob", logprob}};
}

void write_logprobs(const std::string& path, const ChatRunner& r, const Tokenizer& tok, int64_t prompt_tokens,
                    int64_t n_ctx, int32_t top_k) {
  nlohmann::json steps = nlohmann::json::array();
  int step = 0;
  for (const auto& s : r.logprob_steps) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& t : s.token.logprobs.top) top.push_back(token_json(tok, t.id, t.logprob));
    steps.push_back({{"step", step++},
                     {"selected", token_json(tok, s.token.id, s.token.logprobs.chosen.logprob)},
                     {"top", top}});
  }
  nlohmann::json j = {{"source", "dwarfstar"}, {"prompt_tokens", prompt_tokens}, {"ctx", n_ctx},
                      {"top_k", top_k},        {"steps", steps}};
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("--dump-logprobs {}: cannot open for writing", path);
  f << j.dump(1) << '\n';
  if (!f) fail("--dump-logprobs {}: write failed", path);
}

}  // namespace

int run_chat_cli(const Ds4Options& c, const ChatCliOptions& o) {
  if (o.prompt_given && !o.prompt_file.empty()) fail("give -p or --prompt-file, not both");
  const bool one_shot = o.prompt_given || !o.prompt_file.empty();
  const std::string prompt = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file, "--prompt-file");

  EngineOptions eo;
  eo.model_path = c.model_path;
  eo.backend = c.backend;
  eo.threads = c.threads;
  eo.max_batch = c.batch;
  eo.ctx_size = o.ctx;
  eo.act_quant_sim = c.act_quant_sim;
  c.experts.apply(eo);
  eo.dir_steering_file = c.dir_steering_file;
  eo.dir_steering_attn = c.dir_steering_attn;
  eo.dir_steering_ffn = c.dir_steering_ffn;
  eo.collect_imatrix = !c.imatrix_out.empty();
  eo.collect_expert_profile = !c.expert_profile_out.empty();
  eo.prune_mask = c.prune_mask;
  auto engine = Engine::open(eo);
  if (auto d = engine->prune_description(); !d.empty()) fmt::print(stderr, "{}\n", d);
  // Analysis collected while chatting is written when the mode returns (also after an error).
  struct WriteAtExit {
    const std::shared_ptr<const Engine>& e;
    const Ds4Options& c;
    ~WriteAtExit() {
      try {
        if (!c.imatrix_out.empty() && e->analysis_tokens() > 0) {
          e->write_imatrix(c.imatrix_out, {"ds4 chat"}, 1, static_cast<uint32_t>(e->info().n_ctx));
          fmt::print(stderr, "wrote {}\n", c.imatrix_out);
        }
        if (!c.expert_profile_out.empty()) {
          e->write_expert_profile(c.expert_profile_out);
          fmt::print(stderr, "wrote {}\n", c.expert_profile_out);
        }
      } catch (const std::exception& x) {
        fmt::print(stderr, "ds4: error: {}\n", x.what());
      }
    }
  } write_at_exit{engine, c};
  if (!c.verbose && !engine->memory_plan().expert_streaming.empty())
    fmt::print(stderr, "{}\n", engine->memory_plan().expert_streaming);
  const auto& info = engine->info();
  if (c.verbose) {
    fmt::print(stderr, "ds4: {} ({}), model id {}, {} layers, vocab {}, ctx {} (trained {}), {} threads, prefill chunk {}\n",
               info.model_name, c.model_path, info.model_id, info.n_layer, info.n_vocab, info.n_ctx,
               info.n_ctx_train, info.threads, engine->options().max_batch);
    fmt::print(stderr, "{}\n", engine->memory_plan().describe());
  }
  const Tokenizer& tok = engine->tokenizer();  // every mode below needs text

  if (o.dump_tokens) {
    if (!one_shot) fail("--dump-tokens needs -p or --prompt-file");
    for (int32_t id : tok.encode(prompt, /*parse_special=*/true))
      fmt::print("{}\t{}\n", id, escape_piece(tok.token_to_piece(id)));
    return 0;
  }

  ChatRunner runner(engine, o);
  if (!one_shot) {
    if (!o.dump_logprobs.empty()) fail("--dump-logprobs needs -p or --prompt-file");
    return run_repl(runner, o);
  }
  install_interrupt_handler();
  const TurnStats st = runner.turn(prompt, stdout);
  restore_default_interrupt();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  runner.print_stats(st);
  if (c.stats && !engine->expert_stats().empty()) fmt::print(stderr, "{}", engine->expert_stats());
  if (!o.dump_logprobs.empty())
    write_logprobs(o.dump_logprobs, runner, tok, st.prompt_tokens + st.reused_tokens, runner.session().n_ctx(),
                   o.logprobs_top_k);
  return 0;
}

}  // namespace ds4::tools
