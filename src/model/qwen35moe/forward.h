#pragma once
// Internal: one evaluation of a batch of tokens through qwen35moe (forward.cpp: embedding,
// layers, head; deltanet.cpp: Gated DeltaNet; attention.cpp: gated full attention; moe.cpp).
#include <cstdint>
#include <span>

#include "model/qwen35moe/model.h"

namespace ds4::model::qwen35moe {

using FBuf = compute::Buffer<float>;

class Forward {
 public:
  Forward(const Model& m, compute::Backend& be, State& st, std::span<const int32_t> tokens)
      : m_(m), hp_(m.hp_), w_(m.w_), be_(be), st_(st), tokens_(tokens), n_(static_cast<int64_t>(tokens.size())),
        p0_(st.n_pos) {}
  void run(float* logits_all, bool need_last_logits);

 private:
  FBuf buf(int64_t n) { return FBuf(be_, static_cast<size_t>(n)); }
  FBuf project(const compute::Matrix& w, const FBuf& x);
  // Each returns the sublayer output (n_ x n_embd) for the normed input xn.
  FBuf deltanet(int64_t il, const FBuf& xn);
  FBuf attention(int64_t il, const FBuf& xn);
  FBuf moe(int64_t il, const FBuf& xn);

  const Model& m_;
  const HParams& hp_;
  const Weights& w_;
  compute::Backend& be_;
  State& st_;
  std::span<const int32_t> tokens_;
  int64_t n_;
  int64_t p0_;
};

}  // namespace ds4::model::qwen35moe
