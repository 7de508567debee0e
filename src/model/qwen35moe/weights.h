#pragma once
// Binding of every qwen35moe tensor (llama.cpp names: blk.N.attn_qkv, ssm_conv1d, ssm_a, ...)
// to typed views into the mapped GGUF. Every tensor is checked for presence, type and shape
// before anything is computed; a mismatch throws ds4::Error naming the tensor.
#include <cstdint>
#include <deque>
#include <vector>

#include "compute/backend.h"
#include "model/qwen35moe/hparams.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model::qwen35moe {

struct LayerWeights {
  const float* attn_norm = nullptr;       // n_embd (the GGUF holds 1 + w of the zero-centred norm)
  const float* post_norm = nullptr;       // n_embd
  // full attention
  compute::Matrix wq;                     // n_head * head_dim * 2 rows: per head [query | gate]
  compute::Matrix wk, wv, wo;
  const float* q_norm = nullptr;          // head_dim
  const float* k_norm = nullptr;
  // Gated DeltaNet (value heads in llama.cpp's tiled order)
  compute::Matrix wqkv;                   // conv_channels rows
  compute::Matrix wgate;                  // z: n_v * dv rows
  compute::Matrix w_beta, w_alpha;        // n_v rows
  const float* conv = nullptr;            // conv_channels x conv_kernel
  const float* dt_bias = nullptr;         // n_v
  const float* ssm_a = nullptr;           // n_v: -exp(A_log)
  const float* ssm_norm = nullptr;        // dv
  compute::Matrix ssm_out;                // n_embd rows of n_v * dv
  // MoE
  compute::Matrix router;                 // n_expert rows
  compute::ExpertSet gate_exps, up_exps, down_exps;
  compute::Matrix shexp_gate;             // 1 row (sigmoid gate of the shared expert)
  compute::Matrix gate_sh, up_sh, down_sh;
};

struct Weights {
  compute::Matrix token_embd;
  const float* output_norm = nullptr;
  compute::Matrix output;
  std::vector<LayerWeights> layers;

  static Weights bind(const gguf::File& f, HParams& hp);
  const std::deque<std::vector<float>>& widened() const { return widened_; }

 private:
  std::deque<std::vector<float>> widened_;
  friend class Binder;
};

}  // namespace ds4::model::qwen35moe
