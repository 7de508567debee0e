// ds4-bench: grows one session through context frontiers ctx-start, ctx-start + step, ...
// up to ctx-max. At each frontier it times the prefill of the newest interval, then greedy
// generation of --gen-tokens tokens from there, then rewinds to the frontier (a checkpoint,
// not timed) before the next interval. One CSV row per frontier:
//   ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kv_bytes
// kv_bytes: the session state at that context by the engine's memory plan (sliding windows,
// compressor windows, compressed rows; spec §8).
// With streamed experts (--ssd-streaming, tools/common/expert_flags.h), each frontier also
// prints on stderr one "generation experts:" line of key=value figures for its generation
// alone (tier hit rates, bytes read and copied per token, stall), and --stats the totals.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "common/batch_flag.h"
#include "common/expert_flags.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "mem_copy.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int32_t> prompt_tokens(const ds4::Engine& e, const std::string& path, int64_t need, uint64_t seed) {
  std::vector<int32_t> base;
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) ds4::fail("{}: cannot open the prompt file", path);
    std::stringstream ss;
    ss << in.rdbuf();
    base = e.tokenizer().encode(ss.str(), false);
    if (base.empty()) ds4::fail("{}: the prompt file has no tokens", path);
  } else {
    // Random ids: synthetic models have no meaningful text, and the timing does not depend on it.
    std::mt19937_64 rng(seed);
    const int32_t V = e.info().n_vocab;
    base.resize(4096);
    for (auto& t : base) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(need));
  while (static_cast<int64_t>(out.size()) < need) out.push_back(base[out.size() % base.size()]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4-bench: prefill and generation speed per context frontier (CSV)"};
  ds4::EngineOptions eo;
  std::string prompt_file, csv_path, sim = "on";
  int64_t ctx_start = 2048, ctx_max = 8192, step = 0, gen_tokens = 64, gen_warmup = 0;
  uint64_t seed = 1;
  bool mem_copy = false, stats = false;
  ds4::tools::ExpertFlags xf;
  app.add_option("-m,--model", eo.model_path, "GGUF model file")->required();
  app.add_option("--backend", eo.backend, "compute backend: cpu, cuda")->capture_default_str();
  app.add_option("-t,--threads", eo.threads, "CPU compute threads (0: all cores)");
  app.add_option("--prompt-file", prompt_file, "text to prefill (repeated to reach --ctx-max); default: random ids");
  app.add_option("--ctx-start", ctx_start, "first frontier")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--ctx-max", ctx_max, "last frontier")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--step-incr", step, "tokens between frontiers (default: ctx-start)")->check(CLI::NonNegativeNumber);
  app.add_option("--gen-tokens", gen_tokens, "tokens generated at each frontier")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gen-warmup", gen_warmup,
                 "tokens generated at each frontier before the timed ones (not timed, not counted): an expert "
                 "cache then starts warm")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  ds4::tools::add_batch_flag(app, eo.max_batch, "-b,--batch,--batch-size");
  app.add_option("--csv", csv_path, "also write the CSV to this file");
  app.add_option("--act-quant-sim", sim, "FP8 KV / FP4 indexer rounding")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--seed", seed, "seed of the random prompt")->capture_default_str();
  app.add_flag("--mem-copy", mem_copy,
               "first measure a STREAM-like copy and a read-only pass (1 GiB, --threads threads, best of 3) and "
               "print them to stderr: the memory bandwidth decode is bounded by");
  app.add_flag("--stats", stats, "print the expert-streaming counters at the end (stderr)");
  ds4::tools::add_expert_flags(app, xf);
  CLI11_PARSE(app, argc, argv);
  try {
    xf.apply(eo);
    if (step == 0) step = ctx_start;
    if (ctx_max < ctx_start) ds4::fail("--ctx-max {} is below --ctx-start {}", ctx_max, ctx_start);
    eo.act_quant_sim = sim == "on";
    eo.ctx_size = ctx_max + gen_warmup + gen_tokens + 1;
    if (mem_copy) {
      double read = 0;
      const double copy = ds4bench::copy_bandwidth_gbs(eo.threads, size_t{1} << 30, 3, &read);
      fmt::print(stderr, "ds4-bench: memory copy {:.2f} GB/s (read + write, {} threads, 1 GiB, best of 3)\n", copy,
                 eo.threads);
      fmt::print(stderr, "ds4-bench: memory read {:.2f} GB/s (read only, {} threads, 1 GiB, best of 3)\n", read,
                 eo.threads);
    }
    auto t_load = Clock::now();
    auto engine = ds4::Engine::open(eo);
    fmt::print(stderr, "ds4-bench: {} on {} ({} threads), loaded in {:.1f} s\n{}\n", engine->info().model_name,
               engine->info().backend, engine->info().threads, since(t_load), engine->memory_plan().describe());
    ds4::SessionOptions so;
    so.checkpoint_interval = 0;  // checkpoints only where eval ends: at each frontier
    so.max_checkpoints = 2;
    auto session = engine->new_session(so);
    const auto toks = prompt_tokens(*engine, prompt_file, ctx_max, seed);
    const auto& plan = engine->memory_plan();

    std::FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
    if (!csv_path.empty() && !csv) ds4::fail("{}: cannot open for writing", csv_path);
    auto row = [&](const std::string& line) {
      std::fputs(line.c_str(), stdout);
      std::fflush(stdout);
      if (csv) std::fputs(line.c_str(), csv);
    };
    row("ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kv_bytes\n");
    ds4::SamplerConfig greedy;
    greedy.temperature = 0;
    session->set_sampler(greedy);
    int64_t at = 0;
    for (int64_t frontier = ctx_start; frontier <= ctx_max; frontier += step) {
      const int64_t n = frontier - at;
      auto t0 = Clock::now();
      session->eval(std::span(toks).subspan(static_cast<size_t>(at), static_cast<size_t>(n)));
      const double prefill_s = since(t0);
      at = frontier;
      int64_t generated = 0;
      double gen_s = 0;
      if (gen_tokens > 0) {
        ds4::GenerateOptions go;
        go.stop_at_stop_tokens = false;
        if (gen_warmup > 0) {
          go.max_tokens = gen_warmup;
          session->generate(go, [](const ds4::GeneratedToken&) { return true; });
        }
        go.max_tokens = gen_tokens;
        const auto c0 = engine->expert_counters();
        auto t1 = Clock::now();
        auto r = session->generate(go, [](const ds4::GeneratedToken&) { return true; });
        gen_s = since(t1);
        generated = r.n_generated;
        if (const auto c1 = engine->expert_counters(); c0 && c1) {
          const auto d = [](uint64_t a, uint64_t b) { return static_cast<double>(b - a); };
          const double tok = std::max(1.0, d(c0->tokens, c1->tokens));
          const double host_sel = d(c0->hits + c0->inflight_hits + c0->misses, c1->hits + c1->inflight_hits + c1->misses);
          const double gpu_sel = d(c0->gpu_hits + c0->gpu_misses, c1->gpu_hits + c1->gpu_misses);
          // Prefetch (hash + lookahead, host tier): coverage = demand reads it saved over the demand
          // reads there would otherwise have been; wasted = prefetched experts evicted unused.
          const double useful = d(c0->prefetch_useful, c1->prefetch_useful);
          const double wasted = d(c0->prefetch_wasted, c1->prefetch_wasted);
          // Unused: evicted unused in the interval plus every prefetch still unused at its end
          // (cached or in flight, some of which the next token may use): the waste's upper
          // bound, where "wasted" is its lower one.
          const double unused = wasted + static_cast<double>(c1->prefetch_unresolved);
          const double demand = useful + d(c0->misses, c1->misses);
          fmt::print(stderr,
                     "ds4-bench: ctx {} generation experts: tokens={} gpu_hit={:.4f} host_hit={:.4f} "
                     "read_mib_per_token={:.3f} h2d_mib_per_token={:.3f} host_compute_mib_per_token={:.3f} "
                     "stall_ms_per_token={:.3f} "
                     "prefetch_issued_per_token={:.2f} prefetch_coverage={:.4f} wasted_per_useful={:.3f} "
                     "unused_per_useful={:.3f}\n",
                     frontier, tok, gpu_sel > 0 ? d(c0->gpu_hits, c1->gpu_hits) / gpu_sel : 0.0,
                     host_sel > 0 ? d(c0->hits + c0->inflight_hits, c1->hits + c1->inflight_hits) / host_sel : 0.0,
                     d(c0->bytes_read, c1->bytes_read) / 1048576.0 / tok, d(c0->h2d_bytes, c1->h2d_bytes) / 1048576.0 / tok,
                     d(c0->host_computed_bytes, c1->host_computed_bytes) / 1048576.0 / tok,
                     (c1->stall_seconds - c0->stall_seconds) * 1e3 / tok,
                     d(c0->prefetch_issued, c1->prefetch_issued) / tok, demand > 0 ? useful / demand : 0.0,
                     useful > 0 ? wasted / useful : 0.0, useful > 0 ? unused / useful : 0.0);
        }
        session->rewind(frontier);
      }
      const uint64_t kv = plan.state_fixed_bytes + plan.state_bytes_per_token * static_cast<uint64_t>(frontier);
      const double gen_tps = gen_s > 0 ? static_cast<double>(generated) / gen_s : 0.0;
      row(fmt::format("{},{},{:.2f},{},{:.2f},{}\n", frontier, n, static_cast<double>(n) / prefill_s, generated,
                      gen_tps, kv));
      // The FLOP rate the prefill reached, the work counted from the shapes (FlopCount): to set
      // against the device's measured matrix rate (decode_bar.sh measures bf16 in the same call).
      if (const ds4::FlopCount& fc = plan.flops; fc.attention_counted() && n > 0 && prefill_s > 0) {
        const double all = fc.prompt(frontier - n, n), per = all / static_cast<double>(n);
        const double attention = per - fc.matrix_per_token - fc.head / static_cast<double>(n);
        fmt::print(stderr,
                   "ds4-bench: ctx {} prefill {:.2f} GFLOP per token counted from the shapes (matrices {:.2f}, "
                   "attention {:.2f}, head once): {:.2f} TFLOP/s at {:.2f} t/s\n",
                   frontier, per / 1e9, fc.matrix_per_token / 1e9, attention / 1e9, all / prefill_s / 1e12,
                   static_cast<double>(n) / prefill_s);
      }
      // The weight bandwidth decode reached (the plan's bytes per token; the KV rows it also reads
      // are in kv_bytes): to set against --mem-copy's figure or the device's copy rate.
      if (generated > 0)
        fmt::print(stderr, "ds4-bench: ctx {} decode reads {:.3f} GB of weights per token: {:.1f} GB/s at {:.2f} t/s\n",
                   frontier, static_cast<double>(plan.decode_bytes_per_token) / 1e9,
                   static_cast<double>(plan.decode_bytes_per_token) * gen_tps / 1e9, gen_tps);
    }
    if (csv) std::fclose(csv);
    if (stats && !engine->expert_stats().empty()) fmt::print(stderr, "{}", engine->expert_stats());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
