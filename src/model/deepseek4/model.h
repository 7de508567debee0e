#pragma once
// DeepSeek V4 model: hyperparameters + bound weights over a mapped GGUF, and the forward pass
// (spec §6-§7) written against compute::Backend. A Model is immutable after load; all mutable
// inference data lives in a State, so one Model can serve several sessions.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "gguf/gguf.h"
#include "model/deepseek4/hparams.h"
#include "model/deepseek4/state.h"
#include "model/deepseek4/weights.h"

namespace ds4::stream {
class ExpertProvider;
class ZipfRouter;
}

namespace ds4::model::deepseek4 {

// Per-layer hook on the residual stream (directional steering, activation statistics).
// Forward calls it after each sublayer's hyper-connection post, with X: rows x [n_hc][n_embd]
// residual streams in backend memory (row r is the token at position p0 + r). It may read X
// (download) or modify it, with backend ops only, so the same hook runs on every backend.
// A null hook costs nothing: the forward pass does not look at it otherwise.
enum class Sublayer { Attention, Ffn };
class LayerHook {
 public:
  virtual ~LayerHook() = default;
  virtual void after_sublayer(compute::Backend& be, int64_t il, Sublayer which, float* X, int64_t rows,
                              int64_t p0) = 0;
};

struct Options {
  // FP8 KV rounding and Hadamard+FP4 indexer rounding (spec §5.2-5.4), as the official
  // implementation does. Off reproduces transformers' float-only math.
  bool act_quant_sim = true;
  // Longest batch one forward pass takes; longer evaluations run in consecutive chunks (which
  // give the same logits, spec §7) to bound activation memory.
  int64_t max_batch = 512;
  // Routed experts from this provider (src/stream: host cache <- GGUF or packed file) instead
  // of the mapping; not owned, must outlive the Model. Results are bit-identical either way.
  stream::ExpertProvider* experts = nullptr;
  // With `experts` whose provider computes device-tier misses on the host (ProviderOptions::
  // host_compute): the backend that computes them there (a CPU backend; the session backend
  // keeps the rest). Not owned, must outlive the Model. Same logits (streamed_experts.h).
  compute::Backend* expert_host_backend = nullptr;
  // Benchmark routing (stream/synthetic_routing.h, `--bench-routing`): when set, the learned
  // layers take their expert ids from this source (a function of position and layer) instead
  // of the router's top k; the routing weights are still the router's scores at those ids.
  // The router lookahead then guesses from the same source. Not owned; must outlive the Model.
  const stream::ZipfRouter* bench_routing = nullptr;
};

class Model {
 public:
  // Opens, validates and binds the file. Throws ds4::Error on any problem.
  static std::unique_ptr<Model> load(const std::string& path, Options opt = {});
  // Binds an already opened file (the Model takes ownership).
  static std::unique_ptr<Model> from_file(gguf::File file, Options opt = {});

  const HParams& hparams() const { return hp_; }
  const Options& options() const { return opt_; }
  // A fresh state in `be`'s memory with room for n_ctx positions.
  State new_state(compute::Backend& be, int64_t n_ctx) const { return State::create(hp_, be, n_ctx); }

  // Announces every weight byte to `be` (a device backend copies them once; see backend.h),
  // except the routed experts' when Options::experts streams them. Must be called once per
  // backend before its first eval.
  void register_weights(compute::Backend& be) const;

  // Evaluates `tokens` at positions state.n_pos, state.n_pos+1, ... as one batch (layer-major)
  // and advances the state. logits_all, when non-null, receives [tokens.size()][n_vocab];
  // state.logits always ends up holding the last position's logits.
  // A bad token id throws before the state is touched. Any other failure (which valid inputs
  // do not cause) leaves the state unusable: start a new one.
  // `state` must have been created on `be`.
  // Not safe to call concurrently with the same Backend (its scratch buffers are shared).
  // `hook`, when non-null, is called after every sublayer (see LayerHook).
  void eval(compute::Backend& be, State& state, std::span<const int32_t> tokens, float* logits_all,
            LayerHook* hook = nullptr) const;

 private:
  Model(gguf::File file, Options opt);
  gguf::File file_;
  Options opt_;
  HParams hp_;
  Weights w_;
  std::vector<double> freqs_swa_, freqs_compressed_;
  friend class Forward;
};

}  // namespace ds4::model::deepseek4
