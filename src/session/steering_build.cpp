// steer::build: collects residual streams over two prompt sets (ds4-gguf steer-build).
#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "session/engine_impl.h"
#include "session/steering.h"

namespace ds4::steer {

Directions build(const Engine& engine, const std::vector<std::vector<int32_t>>& positive,
                 const std::vector<std::vector<int32_t>>& negative, int64_t first, int64_t count, Position pos) {
  const Engine::Impl& e = engine.impl();
  if (!e.model) fail("steer-build: directional steering is implemented for deepseek4 models only");
  const auto& hp = e.model->hparams();
  if (first < 0 || count < 1 || first + count > hp.n_layer)
    fail("steer-build: layers {}..{} are outside the model's 0..{}", first, first + count - 1, hp.n_layer - 1);
  if (positive.empty() || negative.empty()) fail("steer-build: both prompt sets need at least one prompt");
  std::unique_ptr<compute::Backend> own;
  compute::Backend* be = e.shared_backend.get();
  if (!be) {
    own = compute::make_cpu_backend(e.pool.get());
    be = own.get();
  }
  std::lock_guard lock(e.compute_mu);
  auto run = [&](const std::vector<std::vector<int32_t>>& set, const char* which) {
    CollectHook hook(first, count, hp.n_embd, hp.n_hc, pos);
    for (size_t i = 0; i < set.size(); ++i) {
      const auto& toks = set[i];
      if (toks.empty()) fail("steer-build: {} prompt {} has no tokens", which, i + 1);
      model::deepseek4::State st = e.model->new_state(*be, static_cast<int64_t>(toks.size()));
      hook.begin();
      e.model->eval(*be, st, toks, nullptr, &hook);
      hook.end();
    }
    return hook;
  };
  const CollectHook p = run(positive, "positive");
  const CollectHook n = run(negative, "negative");
  return directions_from(p, n, e.info.model_id, static_cast<uint32_t>(hp.n_layer), static_cast<uint32_t>(first),
                         static_cast<uint32_t>(count), static_cast<uint32_t>(hp.n_embd), pos);
}

}  // namespace ds4::steer

namespace ds4::steer {

std::pair<double, int64_t> score_text(const Engine& engine, std::span<const int32_t> tokens, float attn, float ffn) {
  const Engine::Impl& e = engine.impl();
  if (!e.model) fail("steer: directional steering is implemented for deepseek4 models only");
  if ((attn != 0.0f || ffn != 0.0f) && !e.steering) fail("steer: scales {} / {} need a steering file", attn, ffn);
  if (tokens.size() < 2) return {0.0, 0};
  const auto& hp = e.model->hparams();
  std::unique_ptr<compute::Backend> own;
  compute::Backend* be = e.shared_backend.get();
  if (!be) {
    own = compute::make_cpu_backend(e.pool.get());
    be = own.get();
  }
  std::lock_guard lock(e.compute_mu);
  const size_t V = static_cast<size_t>(hp.n_vocab);
  std::vector<float> logits(tokens.size() * V);
  model::deepseek4::State st = e.model->new_state(*be, static_cast<int64_t>(tokens.size()));
  std::optional<SteerHook> hook;
  if (attn != 0.0f || ffn != 0.0f) hook.emplace(*e.steering, hp.n_hc, attn, ffn);
  e.model->eval(*be, st, tokens, logits.data(), hook ? &*hook : nullptr);
  double sum = 0;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const float* l = logits.data() + t * V;
    double mx = l[0];
    for (size_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(l[v]));
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    sum += static_cast<double>(l[static_cast<size_t>(tokens[t + 1])]) - mx - std::log(z);
  }
  return {sum, static_cast<int64_t>(tokens.size()) - 1};
}

}  // namespace ds4::steer
