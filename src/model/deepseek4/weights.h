#pragma once
// Binding of every DeepSeek V4 tensor (spec §3) to typed views into the mapped GGUF.
// bind() validates presence, type and shape of each tensor before anything is computed;
// a mismatch throws ds4::Error naming the tensor, what was expected and what was found.
// Weight matrices stay in the mapping in their file format (no dequantized copies); only
// 1-D vectors stored as F16/BF16 are widened into small owned f32 buffers.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "model/deepseek4/hparams.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model::deepseek4 {

// A 3-D routed-expert tensor [n_in, n_out, n_expert]: expert e is an n_out x n_in matrix.
using ExpertMatrix = compute::ExpertSet;

// A compressor (spec §6.5): projections to W = lanes * D values, a position bias of R rows of
// W, and the D-wide output norm.
struct CompressorWeights {
  compute::Matrix ape;   // R rows of W (a float type)
  compute::Matrix kv;    // W rows of n_embd
  compute::Matrix gate;  // W rows of n_embd
  const float* norm = nullptr;  // D
};

struct LayerWeights {
  compute::Matrix hc_attn_fn;
  const float* hc_attn_base = nullptr;
  const float* hc_attn_scale = nullptr;
  const float* attn_norm = nullptr;
  compute::Matrix q_a, q_b, kv, out_a, out_b;
  const float* q_a_norm = nullptr;
  const float* kv_norm = nullptr;
  const float* sinks = nullptr;

  bool has_compressor = false;
  CompressorWeights comp;
  bool has_indexer = false;
  compute::Matrix idx_q_b, idx_proj;
  CompressorWeights idx_comp;

  compute::Matrix hc_ffn_fn;
  const float* hc_ffn_base = nullptr;
  const float* hc_ffn_scale = nullptr;
  const float* ffn_norm = nullptr;
  compute::Matrix router;               // n_expert rows of n_embd
  const float* router_bias = nullptr;   // optional (selection only)
  const int32_t* tid2eid = nullptr;     // hash layers: n_vocab rows of n_expert_used
  ExpertMatrix gate_exps, up_exps, down_exps;
  bool has_shared = false;
  compute::Matrix gate_sh, up_sh, down_sh;
};

struct Weights {
  compute::Matrix token_embd;  // n_vocab rows of n_embd
  compute::Matrix output_hc_fn;
  const float* output_hc_base = nullptr;
  const float* output_hc_scale = nullptr;
  const float* output_norm = nullptr;
  compute::Matrix output;  // n_vocab rows of n_embd
  std::vector<LayerWeights> layers;

  // Fills every view; hp.n_vocab is set from token_embd when the metadata had no vocab size.
  static Weights bind(const gguf::File& f, HParams& hp);
  // The f32 copies of F16/BF16 vectors (weights outside the mapping; see backend.h).
  const std::deque<std::vector<float>>& widened() const { return widened_; }

 private:
  std::deque<std::vector<float>> widened_;  // f32 copies of small F16/BF16 vectors
  friend class Binder;
};

}  // namespace ds4::model::deepseek4
