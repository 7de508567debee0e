#pragma once
// Internal: one evaluation of a batch of tokens through the model (spec §6, §7), split over
// forward.cpp (embedding, hyper-connections, head), attention.cpp and moe.cpp.
#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek4/model.h"

namespace ds4::model::deepseek4 {

// Row r of a float or quantized matrix, decoded to f32 (embedding rows, ape rows).
void row_as_f32(const compute::Matrix& m, int64_t r, float* out);

// Outputs of hc_pre for a batch: sublayer inputs plus the per-token post weights and comb.
struct HcMix {
  std::vector<float> x_in;  // [n][d]
  std::vector<float> post;  // [n][n_hc]
  std::vector<float> comb;  // [n][n_hc][n_hc]
};

class Forward {
 public:
  Forward(const Model& m, compute::Backend& be, State& st, std::span<const int32_t> tokens)
      : m_(m), hp_(m.hp_), w_(m.w_), be_(be), st_(st), tokens_(tokens), n_(static_cast<int64_t>(tokens.size())),
        p0_(st.n_pos) {}

  // logits_all: [n][n_vocab] or null. need_last_logits: also store the last row's logits in
  // the state (false for all but the final chunk of a long evaluation).
  void run(float* logits_all, bool need_last_logits);

 private:
  void embed(std::vector<float>& X);
  HcMix hc_pre(const compute::Matrix& fn, const float* base, const float* scale, const std::vector<float>& X);
  compute::HcParams hc_params(const float* scale, const float* base) const;
  void hc_post(const HcMix& mix, const std::vector<float>& y, const std::vector<float>& X, std::vector<float>& Xout);
  void head(const std::vector<float>& X, int64_t first_row, float* logits);

  // attention.cpp
  void attention_layer(int64_t il, const std::vector<float>& X, std::vector<float>& Xout);
  void compressor_step(const CompressorWeights& cw, CompressorState& cs, const float* kvp, const float* scp, int64_t pos,
                       bool is_indexer);
  std::vector<int64_t> indexer_select(int64_t il, const float* q_idx, const float* w_idx, int64_t pos);

  // moe.cpp
  void ffn_layer(int64_t il, const std::vector<float>& X, std::vector<float>& Xout);
  void route(int64_t il, const float* router_logits, int32_t token, int32_t* experts, float* weights) const;

  const Model& m_;
  const HParams& hp_;
  const Weights& w_;
  compute::Backend& be_;
  State& st_;
  std::span<const int32_t> tokens_;
  int64_t n_;
  int64_t p0_;
};

}  // namespace ds4::model::deepseek4
