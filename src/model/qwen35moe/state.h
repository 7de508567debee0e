#pragma once
// Per-session inference state of qwen35moe: per Gated DeltaNet layer the convolution history
// (conv_kernel-1 inputs) and the recurrent state (n_v heads x dv x dk), overwritten in place;
// per full-attention layer the K and V cache (n_ctx positions, append-only). Backend memory
// with fixed capacity, so a decode step never reallocates; counts and tokens on the host.
#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "model/qwen35moe/hparams.h"

namespace ds4::model::qwen35moe {

struct LayerState {
  compute::Buffer<float> conv;   // recurrent layers: (conv_kernel-1) x conv_channels
  compute::Buffer<float> ssm;    // recurrent layers: n_v x dv x dk
  compute::Buffer<float> k, v;   // attention layers: n_ctx x n_head_kv x head_dim
};

struct State {
  compute::Backend* backend = nullptr;
  int64_t n_ctx = 0;
  int64_t n_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<float> logits;     // last position (n_vocab), host
  std::vector<LayerState> layers;

  static State create(const HParams& hp, compute::Backend& be, int64_t n_ctx);
  // Floats of the overwritten (recurrent) part: what a rewind checkpoint copies.
  static uint64_t recurrent_floats(const HParams& hp);
};

}  // namespace ds4::model::qwen35moe
