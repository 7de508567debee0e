#pragma once
// DeepSeek V4 hyperparameters, read from a GGUF's `deepseek4.*` metadata (spec §1).
// Nothing here is a fixed shape: the same struct describes Flash (284B) and a toy test model.
#include <cstdint>
#include <string>
#include <vector>

#include "compute/numerics.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model::deepseek4 {

struct HParams {
  int64_t n_layer = 0;
  int64_t n_embd = 0;        // hidden size d
  int64_t n_vocab = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 1;     // must be 1 (shared K = V, MQA)
  int64_t head_dim = 0;      // key_length == value_length
  int64_t n_rot = 0;         // RoPE dims at the tail of every head
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  std::vector<int64_t> compress_ratio;  // per layer: 0, 4 or 128 (any R > 0 works here)
  int64_t indexer_n_head = 0;
  int64_t indexer_head_dim = 0;
  int64_t indexer_top_k = 0;
  int64_t n_expert = 0;       // routed experts per layer (the most, in a pruned file)
  // Per layer: routed experts in that layer's tensors. All n_expert, except in a file written
  // by `ds4-gguf quantize --prune` (key expert_count_per_layer): pruned learned-routing layers
  // hold fewer; hash-routed layers always hold n_expert.
  std::vector<int64_t> n_expert_layer;
  int64_t n_expert_used = 0;
  int64_t expert_ff = 0;
  int64_t n_expert_shared = 0;
  int64_t n_hash_layers = 0;
  bool expert_weights_norm = true;
  float expert_weights_scale = 1.0f;
  std::vector<float> swiglu_limit;  // per layer; <= 0 means no clamp
  int n_hc = 0;
  int sinkhorn_iters = 0;
  float hc_eps = 1e-6f;
  float rms_eps = 1e-6f;
  compute::RopeParams rope_swa;         // layers with ratio 0
  compute::RopeParams rope_compressed;  // layers with ratio > 0 (q, kv, compressed rows, indexer)
  int64_t context_length = 0;           // informational

  int64_t ratio(int64_t il) const { return compress_ratio[static_cast<size_t>(il)]; }
  bool is_hash_layer(int64_t il) const { return il < n_hash_layers; }
  int64_t experts_in(int64_t il) const { return n_expert_layer[static_cast<size_t>(il)]; }
  bool experts_pruned() const;  // some layer holds fewer than n_expert

  // Reads and validates (throws ds4::Error naming the key and the problem).
  static HParams from_gguf(const gguf::File& f);
  std::string describe() const;
};

}  // namespace ds4::model::deepseek4
