#pragma once
// DeepSeek V4 hyperparameters read from a Hugging Face config.json, in either dialect:
// * the official checkpoint's legacy fields (compress_ratios, num_hash_layers, qk_rope_head_dim,
//   rope_scaling {type: yarn, ...});
// * what transformers' save_pretrained writes (layer_types + compress_rates, mlp_layer_types,
//   partial_rotary_factor, nested rope_parameters {main, compress}).
// Also the shape description the GGUF layout is built from (ModelShape), shared with `synth`.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ds4::convert {

struct YarnParams {
  bool enabled = false;           // false: plain RoPE on compressed layers too (factor 1)
  double factor = 1.0;
  uint64_t original_context = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// Everything the GGUF layout and metadata need. Field names follow spec §1.
struct ModelShape {
  uint32_t n_layers = 0;
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  uint32_t n_heads = 0;
  uint32_t head_dim = 0;
  uint32_t rope_dim = 0;
  uint32_t q_lora_rank = 0;
  uint32_t o_groups = 0;
  uint32_t o_lora_rank = 0;
  uint32_t sliding_window = 0;
  std::vector<uint32_t> compress_ratios;  // one per layer: 0, 4 or 128 (any R>0 is laid out generically)
  uint32_t indexer_heads = 0;
  uint32_t indexer_head_dim = 0;
  uint32_t indexer_top_k = 0;
  uint32_t n_experts = 0;
  uint32_t n_experts_used = 0;
  uint32_t expert_ffn = 0;
  uint32_t shared_ffn = 0;
  uint32_t n_hash_layers = 0;            // layers 0..n-1 route by tid2eid
  bool expert_weights_norm = true;
  double expert_weights_scale = 1.5;
  double swiglu_limit = 10.0;
  uint32_t hc_mult = 4;
  uint32_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_eps = 1e-6;
  double rope_base = 10000.0;
  double compress_rope_base = 160000.0;
  YarnParams yarn;
  uint64_t context_length = 0;
  std::optional<uint32_t> bos_id, eos_id;
  std::string name;
};

// The published Flash shape (spec §1) with `layers` layers: ratios 0,0 then 4/128 alternating.
ModelShape flash_shape(uint32_t layers = 43);

// Parses and validates; errors name `path` and the JSON field.
ModelShape parse_hf_config(const nlohmann::json& j, const std::string& path);
ModelShape read_hf_config(const std::string& path);

}  // namespace ds4::convert
