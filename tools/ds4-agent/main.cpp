// ds4-agent: a terminal coding agent running DeepSeek V4 in-process (src/agent). Flags ->
// AgentCliOptions -> run_agent_cli; errors print one message and exit 1.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "agent/app.h"
#include "common/batch_flag.h"
#include "common/expert_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"ds4-agent: a coding agent in the terminal, running DeepSeek V4 in-process"};
  ds4::agent::AgentCliOptions o;
  std::string resume;
  app.add_option("-m,--model", o.model_path, "GGUF model file")->capture_default_str();
  app.add_option("--backend", o.backend, "compute backend: cpu, or cuda (a `make cuda` build)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "worker threads (0: all cores)")->check(CLI::NonNegativeNumber);
  ds4::tools::add_batch_flag(app, o.batch);
  app.add_option("--dir-steering-file", o.dir_steering_file, "directional steering file (ds4-gguf steer-build)");
  app.add_option("--dir-steering-attn", o.dir_steering_attn, "steering scale after attention sublayers (default 0)");
  app.add_option("--dir-steering-ffn", o.dir_steering_ffn, "steering scale after FFN sublayers (default 0)");
  ds4::tools::ExpertFlags experts;
  ds4::tools::add_expert_flags(app, experts);
  o.configure_engine = [&experts](ds4::EngineOptions& eo) { experts.apply(eo); };
  app.add_option("-c,--ctx", o.ctx, "context size in tokens (default: the model's training context)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temp", o.temperature, "sampling temperature; 0 = greedy (default 1; tool-call structure is always greedy)");
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens; 0 = off (default 0)");
  app.add_option("--top-p", o.top_p, "nucleus sampling mass in [0,1]; 1 = off (default 1)");
  app.add_option("--min-p", o.min_p, "drop tokens below min_p x p(top) (default 0.05)");
  app.add_option("--seed", o.seed, "sampling seed (default: random)");
  app.add_flag_callback("--nothink", [&o] { o.think = "none"; }, "answer directly, no reasoning");
  app.add_flag_callback("--think", [&o] { o.think = "high"; }, "reason before answering (default)");
  app.add_flag_callback("--think-max", [&o] { o.think = "max"; },
                        "maximum reasoning effort (needs --ctx >= 393216, else behaves as --think)");
  app.add_option("-n", o.n_predict, "tokens per model turn (default: until the model stops or the context is full)");
  app.add_option_function<std::string>(
      "-p,--prompt",
      [&o](const std::string& s) {
        o.prompt = s;
        o.prompt_given = true;
      },
      "run this task non-interactively and exit (0: finished, 1: error, 2: turn limit, 130: interrupted)");
  app.add_flag("-y,--yes", o.yes, "run commands and write files without asking");
  app.add_option("--max-turns", o.max_turns, "model turns per request (default 50)")->check(CLI::PositiveNumber);
  app.add_flag("--json", o.json, "print events as JSON lines on stdout");
  app.add_option("--workdir", o.workdir, "directory the file tools are confined to (default: the current one)");
  app.add_option("--resume", resume, "continue a saved session (default: the most recent)")
      ->expected(0, 1)
      ->default_str("last");
  app.add_flag("--save", o.save, "with -p: save the session at the end");
  app.add_option("--sessions-dir", o.sessions_dir, "where sessions are saved (default: ~/.ds4/agent)");
  app.add_option("--trace", o.trace, "append events as JSON lines to FILE");
  app.add_flag("--no-color", o.no_color, "no ANSI colors");
  app.add_option("--debug-script", o.debug_script, "TEST SCAFFOLDING: force the model's output from a rules file")
      ->group("");
  app.footer(
      "Without -p an interactive session starts (/help lists its commands). Sessions are saved in\n"
      "~/.ds4/agent/ with their model state, so --resume continues without evaluating the history again.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.count("--resume")) o.resume = resume.empty() ? std::string("last") : resume;
  try {
    if (o.backend == "cuda") {
      std::fprintf(stderr, "ds4-agent: error: --backend cuda: this build has no CUDA support\n");
      return 1;
    }
    return ds4::agent::run_agent_cli(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-agent: error: %s\n", e.what());
    return 1;
  }
}
