#pragma once
// Qwen3.5/3.6 MoE (`qwen35moe`) hyperparameters, read from a GGUF's `qwen35moe.*` metadata
// under the key names llama.cpp's loader uses (src/models/qwen35moe.cpp there), so one file
// runs in both. Nothing is a fixed shape; the layer layout (Gated DeltaNet or full attention)
// comes from `attention.recurrent_layers` or, without it, `full_attention_interval`.
#include <cstdint>
#include <string>
#include <vector>

namespace ds4::gguf {
class File;
}

namespace ds4::model::qwen35moe {

inline constexpr const char* kArch = "qwen35moe";

struct HParams {
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  // gated full attention
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;        // key_length == value_length
  int64_t n_rot = 0;           // NeoX RoPE on the first n_rot dims of each head
  double rope_base = 10000.0;
  std::vector<int64_t> rope_sections;  // M-RoPE sections (text positions: informational)
  // Gated DeltaNet (llama.cpp's ssm.* keys)
  int64_t conv_kernel = 0;     // ssm.conv_kernel
  int64_t ssm_dk = 0;          // ssm.state_size: key head dim
  int64_t ssm_n_k = 0;         // ssm.group_count: key heads
  int64_t ssm_n_v = 0;         // ssm.time_step_rank: value heads
  int64_t ssm_dv = 0;          // ssm.inner_size / value heads
  std::vector<bool> recurrent; // per layer: true = Gated DeltaNet, false = full attention
  // MoE
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t expert_ff = 0;
  int64_t shared_ff = 0;       // 0: no shared expert
  float expert_weights_scale = 1.0f;
  float rms_eps = 1e-6f;
  int64_t context_length = 0;  // informational

  bool is_recurrent(int64_t il) const { return recurrent[static_cast<size_t>(il)]; }
  int64_t conv_channels() const { return 2 * ssm_n_k * ssm_dk + ssm_n_v * ssm_dv; }
  int64_t n_recurrent() const;
  int64_t n_full() const { return n_layer - n_recurrent(); }

  // Reads and validates (throws ds4::Error naming the key and the problem).
  static HParams from_gguf(const gguf::File& f);
  std::string describe() const;
};

}  // namespace ds4::model::qwen35moe
