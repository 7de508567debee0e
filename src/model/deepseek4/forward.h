#pragma once
// Internal: one evaluation of a batch of tokens through the model (spec §6, §7), split over
// forward.cpp (embedding, hyper-connections, head), attention.cpp and moe.cpp. Every tensor
// lives in backend memory (compute/backend.h); only the logits come back to the host.
#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek4/model.h"

namespace ds4::model::deepseek4 {

using FBuf = compute::Buffer<float>;

// Outputs of hc_pre for a batch: sublayer inputs (normalized) plus the per-token post weights and comb.
struct HcMix {
  FBuf x_in;  // [n][d]
  FBuf post;  // [n][n_hc]
  FBuf comb;  // [n][n_hc][n_hc]
};

class Forward {
 public:
  Forward(const Model& m, compute::Backend& be, State& st, std::span<const int32_t> tokens,
          LayerHook* hook = nullptr)
      : m_(m), hp_(m.hp_), w_(m.w_), be_(be), st_(st), tokens_(tokens), n_(static_cast<int64_t>(tokens.size())),
        p0_(st.n_pos), hook_(hook) {}

  // logits_all: [n][n_vocab] (host) or null. need_last_logits: also store the last row's
  // logits in the state (false for all but the final chunk of a long evaluation).
  void run(float* logits_all, bool need_last_logits);

 private:
  FBuf buf(int64_t n) { return FBuf(be_, static_cast<size_t>(n)); }
  FBuf project(const compute::Matrix& w, const FBuf& x, int64_t rows);
  // x_in comes back normalized by rms_norm with `norm` (the sub-layer's attn_norm / ffn_norm).
  HcMix hc_pre(const compute::Matrix& fn, const float* base, const float* scale, const FBuf& X, const float* norm);
  compute::HcParams hc_params(const float* scale, const float* base) const;
  void hc_post(const HcMix& mix, const FBuf& y, const FBuf& X, FBuf& Xout);
  // Logits of rows first_row.. of the batch (backend memory).
  FBuf head_logits(const FBuf& X, int64_t first_row);
  // Embedding and every layer: the final residual streams.
  FBuf layers();
  // Decode-step graphs (backend.h): replays or records this step when the backend can; false
  // when the step must run op by op.
  bool run_step_graph();
  compute::StepKey step_key() const;
  // The host bookkeeping a replayed step skipped (compressed-row counts).
  void note_replayed_step();
  // Benchmark routing (Options::bench_routing): the batch's forced expert ids, [layer][row][k]
  // (hash layers' entries unused, 0), on the host.
  std::vector<int32_t> bench_ids() const;

  // attention.cpp
  void attention_layer(int64_t il, const FBuf& X, FBuf& Xout);
  // One compressor over the batch: its stores and the rows of every window the batch completes.
  void compressor_chunk(const CompressorWeights& cw, CompressorState& cs, const float* kvp, const float* scp,
                        bool is_indexer);
  // Host bookkeeping of one token's compressor step: counts the row emitted when the window
  // ending at pos completes (false when none does); the capacity is checked first.
  static bool claim_row(CompressorState& cs, int64_t pos);
  // The indexer's top-k compressed rows for every query of the batch that sees more than top-k
  // rows (backend memory, n_ rows of top-k entries; the other rows unset).
  compute::Buffer<int32_t> indexer_chunk(int64_t il, const float* q_idx, const float* w_idx);

  // moe.cpp
  void ffn_layer(int64_t il, const FBuf& X, FBuf& Xout);

  const Model& m_;
  const HParams& hp_;
  const Weights& w_;
  compute::Backend& be_;
  State& st_;
  std::span<const int32_t> tokens_;
  compute::Buffer<int32_t> tokens_dev_;
  const int32_t* tok_dev_ = nullptr;  // the batch's token ids in backend memory
  compute::Buffer<int32_t> bench_buf_;
  const int32_t* bench_dev_ = nullptr;  // bench_ids() in backend memory (null: the router's top k)
  int64_t n_;
  int64_t p0_;
  LayerHook* hook_;
};

}  // namespace ds4::model::deepseek4
