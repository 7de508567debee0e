// ds4-eval -m MODEL --ppl TEXT [--kl-base REF.gguf] [--ctx N] [--max-chunks N] [--prune-mask M]
//          [--base-prune-mask M] [-t N] [--json OUT]
//
// The text is tokenized with MODEL's vocabulary (no BOS) and cut into consecutive chunks of N
// tokens; each chunk is evaluated from an empty context in one batch, and every position but
// the last predicts the next token (N-1 scored predictions per full chunk). Perplexity =
// exp(mean negative log-likelihood). With --kl-base, the reference model (same vocabulary)
// evaluates the same chunks and, per scored position, KL(P_ref || P_model) of the two
// next-token distributions (softmax of the logits, in double) and whether their argmax agree.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "compute/analysis_backend.h"
#include "compute/backends.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/tokenizer.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "session/analysis.h"

namespace {

using namespace ds4;

struct Loaded {
  std::unique_ptr<session::Analysis> analysis;
  std::unique_ptr<model::deepseek4::Model> model;
  std::unique_ptr<compute::Backend> cpu;
  std::unique_ptr<compute::Backend> wrapped;
  compute::Backend* be = nullptr;
  std::optional<Tokenizer> tok;
};

Loaded load(const std::string& path, const std::string& mask, ThreadPool& pool, bool want_tokenizer) {
  Loaded l;
  gguf::File f = gguf::File::open(path);
  if (f.get_string("general.architecture") != "deepseek4") fail("{}: ds4-eval handles deepseek4 models", path);
  if (want_tokenizer) l.tok.emplace(Tokenizer::from_gguf(f));
  const auto hp = model::deepseek4::HParams::from_gguf(f);
  l.analysis = session::make_analysis(f, hp, false, false, mask);
  l.model = model::deepseek4::Model::from_file(std::move(f), {});
  l.cpu = compute::make_cpu_backend(&pool);
  l.be = l.cpu.get();
  if (l.analysis) {
    l.wrapped = std::make_unique<compute::AnalysisBackend>(*l.cpu, l.analysis->stats, l.analysis->cfg);
    l.be = l.wrapped.get();
  }
  l.model->register_weights(*l.be);
  return l;
}

// log-softmax of one row, in double.
void log_softmax(const float* x, size_t n, std::vector<double>& out) {
  out.resize(n);
  double m = -INFINITY;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) - lse;
}

size_t argmax(const float* x, size_t n) { return static_cast<size_t>(std::max_element(x, x + n) - x); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4-eval: perplexity and KL divergence against a reference model"};
  std::string model_path, text_path, base_path, mask, base_mask, json_out;
  int64_t ctx = 256, max_chunks = 0;
  int threads = 0;
  app.add_option("-m,--model", model_path, "model to evaluate")->required();
  app.add_option("--ppl", text_path, "text file to score")->required();
  app.add_option("--kl-base", base_path, "reference model: KL(P_ref || P_model) and top-1 agreement");
  app.add_option("--ctx", ctx, "tokens per chunk (each chunk starts from an empty context)")->capture_default_str();
  app.add_option("--max-chunks", max_chunks, "score at most N chunks (0: the whole text)");
  app.add_option("--prune-mask", mask, "remove the experts of this mask from the model's routing");
  app.add_option("--base-prune-mask", base_mask, "the same for the reference model");
  app.add_option("-t,--threads", threads, "compute threads (0: all)");
  app.add_option("--json", json_out, "also write the numbers as JSON here");
  CLI11_PARSE(app, argc, argv);
  try {
    if (ctx < 2) fail("--ctx {} must be at least 2", ctx);
    ThreadPool pool(threads);
    Loaded m = load(model_path, mask, pool, true);
    std::optional<Loaded> b;
    if (!base_path.empty()) {
      b.emplace(load(base_path, base_mask, pool, false));
      if (b->model->hparams().n_vocab != m.model->hparams().n_vocab)
        fail("--kl-base {}: vocabulary of {} tokens, the model has {}", base_path, b->model->hparams().n_vocab,
             m.model->hparams().n_vocab);
    }
    std::ifstream tf(text_path, std::ios::binary);
    if (!tf) fail("--ppl {}: cannot open", text_path);
    std::stringstream ss;
    ss << tf.rdbuf();
    const std::vector<int32_t> ids = m.tok->encode(ss.str(), false);
    if (ids.size() < 2) fail("--ppl {}: fewer than 2 tokens", text_path);

    const size_t V = static_cast<size_t>(m.model->hparams().n_vocab);
    double nll = 0, nll_base = 0, kl = 0, kl_max = 0;
    int64_t scored = 0, agree = 0, chunks = 0;
    std::vector<double> kls;
    std::vector<float> la, lb;
    std::vector<double> lpa, lpb;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t c0 = 0; c0 + 1 < ids.size(); c0 += static_cast<size_t>(ctx)) {
      if (max_chunks > 0 && chunks >= max_chunks) break;
      const size_t n = std::min(ids.size() - c0, static_cast<size_t>(ctx));
      if (n < 2) break;
      std::span<const int32_t> chunk(ids.data() + c0, n);
      la.resize(n * V);
      auto st = m.model->new_state(*m.be, static_cast<int64_t>(n));
      m.model->eval(*m.be, st, chunk, la.data());
      if (b) {
        lb.resize(n * V);
        auto sb = b->model->new_state(*b->be, static_cast<int64_t>(n));
        b->model->eval(*b->be, sb, chunk, lb.data());
      }
      for (size_t i = 0; i + 1 < n; ++i) {
        const float* a = la.data() + i * V;
        log_softmax(a, V, lpa);
        nll -= lpa[static_cast<size_t>(chunk[i + 1])];
        if (b) {
          const float* r = lb.data() + i * V;
          log_softmax(r, V, lpb);
          nll_base -= lpb[static_cast<size_t>(chunk[i + 1])];
          double k = 0;
          for (size_t v = 0; v < V; ++v) k += std::exp(lpb[v]) * (lpb[v] - lpa[v]);
          k = std::max(k, 0.0);
          kl += k;
          kls.push_back(k);
          kl_max = std::max(kl_max, k);
          agree += argmax(a, V) == argmax(r, V);
        }
        ++scored;
      }
      ++chunks;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (::isatty(2)) fmt::print(stderr, "\r\033[Kchunk {}  {} predictions  ppl {:.3f}  {:.0f} t/s", chunks, scored, std::exp(nll / scored),
                 s > 0 ? (c0 + n) / s : 0.0);
    }
    if (::isatty(2)) fmt::print(stderr, "\n");
    nlohmann::json j = {{"model", model_path}, {"text", text_path}, {"ctx", ctx}, {"chunks", chunks},
                        {"predictions", scored}, {"ppl", std::exp(nll / scored)}, {"nll", nll / scored}};
    fmt::print("model {}: ppl {:.4f} (mean nll {:.5f}) over {} predictions in {} chunks of <= {} tokens\n", model_path,
               std::exp(nll / scored), nll / scored, scored, chunks, ctx);
    if (!mask.empty()) j["prune_mask"] = mask;
    if (b) {
      std::sort(kls.begin(), kls.end());
      const double p99 = kls[std::min(kls.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(kls.size())))];
      j["base"] = base_path;
      j["base_ppl"] = std::exp(nll_base / scored);
      j["kl_mean"] = kl / scored;
      j["kl_p99"] = p99;
      j["kl_max"] = kl_max;
      j["top1_agreement"] = static_cast<double>(agree) / scored;
      fmt::print("base  {}: ppl {:.4f}\nKL(base || model) mean {:.6f}, p99 {:.6f}, max {:.6f}; top-1 agreement {:.4f}\n",
                 base_path, std::exp(nll_base / scored), kl / scored, p99, kl_max, static_cast<double>(agree) / scored);
    }
    if (!json_out.empty()) {
      std::ofstream o(json_out);
      o << j.dump(1) << "\n";
      if (!o) fail("--json {}: write failed", json_out);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "ds4-eval: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
