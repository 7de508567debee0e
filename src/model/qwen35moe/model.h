#pragma once
// Qwen3.5/3.6 MoE (`qwen35moe`, text model): hyperparameters + bound weights over a mapped
// GGUF, and the forward pass written against compute::Backend (hybrid Gated DeltaNet / gated
// full attention layers, softmax top-k MoE with a sigmoid-gated shared expert). Immutable
// after load; all mutable inference data lives in a State.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "gguf/gguf.h"
#include "model/qwen35moe/hparams.h"
#include "model/qwen35moe/state.h"
#include "model/qwen35moe/weights.h"

namespace ds4::stream {
class ExpertProvider;
}

namespace ds4::model::qwen35moe {

struct Options {
  // Longest batch one forward pass takes; longer evaluations run in consecutive chunks (same
  // logits: every op computes a row the same way in any batch).
  int64_t max_batch = 512;
  // Routed experts from this provider (src/stream: host cache <- GGUF or packed file) instead
  // of the mapped GGUF; null = resident. Same logits either way (model/common/streamed_experts.h).
  stream::ExpertProvider* experts = nullptr;
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string& path, Options opt = {});
  static std::unique_ptr<Model> from_file(gguf::File file, Options opt = {});

  const HParams& hparams() const { return hp_; }
  const gguf::File& file() const { return file_; }
  State new_state(compute::Backend& be, int64_t n_ctx) const { return State::create(hp_, be, n_ctx); }
  void register_weights(compute::Backend& be) const;

  // Evaluates `tokens` at positions state.n_pos, ... and advances the state; logits_all, when
  // non-null, receives [tokens.size()][n_vocab]; state.logits holds the last position's. A bad
  // token id throws before the state is touched; any other failure leaves it unusable.
  void eval(compute::Backend& be, State& state, std::span<const int32_t> tokens, float* logits_all) const;

 private:
  Model(gguf::File file, Options opt);
  gguf::File file_;
  Options opt_;
  HParams hp_;
  Weights w_;
  std::vector<double> freqs_;
  friend class Forward;
};

}  // namespace ds4::model::qwen35moe
