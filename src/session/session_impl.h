#pragma once
// Internal: what a Session holds (include/ds4/session.h).
#include <deque>
#include <memory>

#include "compute/backend.h"
#include "ds4/session.h"
#include "model/deepseek4/state.h"
#include "model/qwen35moe/state.h"
#include "session/checkpoint.h"
#include "session/engine_impl.h"

namespace ds4 {

// The steering a state was computed under (payloads record it). id 0: plain (no steering or
// both scales 0). mixed: the scales changed while the state grew.
struct SteerSig {
  uint64_t id = 0;
  float attn = 0, ffn = 0;
  bool mixed = false;
  bool operator==(const SteerSig&) const = default;
};

struct Session::Impl {
  std::shared_ptr<const Engine> engine;
  const Engine::Impl* e = nullptr;
  SessionOptions options;
  int64_t n_ctx = 0;
  compute::Backend* backend = nullptr;           // own_backend, or the engine's shared one (CUDA)
  std::unique_ptr<compute::Backend> own_backend;
  std::unique_ptr<compute::Backend> analysis_backend;  // wraps the one above (EngineOptions::collect_*)
  model::deepseek4::State state;    // DeepSeek V4 engines
  model::qwen35moe::State qstate;   // qwen35moe engines
  Sampler sampler;
  std::deque<session::Checkpoint> checkpoints;  // ascending n_pos, all <= state.n_pos
  float steer_attn = 0, steer_ffn = 0;  // scales for the next evaluations
  SteerSig state_sig;                   // what the current state was computed under
  SteerSig current_sig() const;         // what the next evaluation runs under

  // Appends tokens (ids already validated, context already checked) in chunks that end at
  // max_batch and checkpoint-interval boundaries. end_checkpoint: also checkpoint the final
  // position. Returns false when cancelled.
  bool append(std::span<const int32_t> tokens, const EvalOptions& o, bool end_checkpoint, int64_t progress_base,
              int64_t progress_total);
  void add_checkpoint();
  // Restores the newest checkpoint at or below n (or the empty state); drops later ones.
  void restore_at_most(int64_t n);
  void check_fits(int64_t total) const;
  void check_ids(std::span<const int32_t> tokens) const;
  void reset();
  bool qwen() const { return e->qwen != nullptr; }
  int64_t n_pos() const { return qwen() ? qstate.n_pos : state.n_pos; }
  const std::vector<int32_t>& tokens() const { return qwen() ? qstate.tokens : state.tokens; }
  const std::vector<float>& logits() const { return qwen() ? qstate.logits : state.logits; }
  // A fresh, empty state of the engine's family.
  void fresh_state();
  // One evaluation of the engine's model on the state (logits of the last token kept).
  void eval_tokens(std::span<const int32_t> tokens);
  model::deepseek4::State new_state() const { return e->model->new_state(*backend, n_ctx); }
};

}  // namespace ds4
