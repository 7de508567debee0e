#pragma once
// Writes random DeepSeek V4 GGUF files in the spec §3 layout, with the spec §1 metadata, for
// tests of the loader and the forward pass. Shapes are free: the same writer produces a toy
// model or the full Flash table (with large tensors left as file holes).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ds4::test {

struct SynthConfig {
  int64_t n_layer = 4;
  int64_t n_embd = 64;
  int64_t n_vocab = 96;
  int64_t n_head = 4;
  int64_t head_dim = 64;
  int64_t n_rot = 16;
  int64_t q_lora_rank = 32;
  int64_t o_groups = 2;
  int64_t o_lora_rank = 32;
  int64_t sliding_window = 8;
  std::vector<int64_t> compress_ratios = {0, 4, 8, 4};
  int64_t indexer_n_head = 4;
  int64_t indexer_head_dim = 32;
  int64_t indexer_top_k = 4;
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t expert_ff = 32;
  int64_t n_expert_shared = 1;
  int64_t n_hash_layers = 1;
  int n_hc = 4;
  bool yarn = true;
  uint32_t gating_func = 4;  // deepseek4.expert_gating_func (4 = sqrt(softplus))
  uint32_t seed = 1;

  GgmlType dense_type = GgmlType::F32;  // attention / shared-expert / output matrices
  GgmlType small_type = GgmlType::F32;  // HC, compressor, indexer, router matrices; embedding
  std::vector<GgmlType> expert_gate_up_type;  // per layer; empty = F32
  std::vector<GgmlType> expert_down_type;     // per layer; empty = F32
  uint64_t hole_above_bytes = 0;  // > 0: tensors larger than this are written as zero holes

  // Test hooks for error paths: drop a tensor or key, or override a tensor's type/shape.
  std::string drop_tensor;
  std::string drop_key;
  std::vector<int64_t> ratios_key;
  int64_t hash_layer_key = -1;  // >= 0: written as hash_layer_count instead of n_hash_layers  // non-empty: written as compress_ratios instead
  std::map<std::string, std::vector<uint64_t>> shape_override;
  std::map<std::string, GgmlType> type_override;
  std::function<void(const std::string& name, std::vector<int32_t>& data)> edit_i32;

  // The published Flash shapes (spec §1, §3) with q2-style expert types.
  static SynthConfig flash(int64_t n_layer);
};

void write_synthetic_model(const std::string& path, const SynthConfig& c);

}  // namespace ds4::test
