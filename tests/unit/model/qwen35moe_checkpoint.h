#pragma once
// A random Qwen3_5MoeForCausalLM checkpoint in transformers' save_pretrained layout
// (model.layers.N.linear_attn.in_proj_qkv.weight, stacked mlp.experts.gate_up_proj, ...) and its
// config.json, for converter and engine tests that need no Python. Values follow the spreads of
// tools/oracle/qwen35moe/make_fixtures.py (order-1 activations, decays exp(g) in ~(0.3, 1),
// zero-centred norm weights). Deterministic in the seed.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../convert/official_checkpoint.h"

namespace ds4::test {

struct QwenTiny {
  int vocab = 256, hidden = 32, heads = 2, kv_heads = 1, head_dim = 32;
  int k_heads = 2, v_heads = 4, dk = 16, dv = 16, conv = 4;
  int experts = 8, top_k = 2, expert_ff = 16, shared_ff = 16;
  std::vector<std::string> layers = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
  double rope_theta = 10000000.0;
  bool per_expert = false;  // write mlp.experts.E.{gate,up,down}_proj.weight instead of stacks
  // The published checkpoints' layout (Qwen3_5MoeForConditionalGeneration): text weights under
  // model.language_model., config.json's text part under text_config, plus a vision tower
  // (model.visual.*) and an MTP head (mtp.*) that the text model does not use. Same values.
  bool multimodal = false;
};

inline void write_qwen_checkpoint(const std::string& dir, const QwenTiny& c, uint32_t seed) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  Ckpt ck;
  auto put = [&](const std::string& name, std::vector<uint64_t> shape, auto gen) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    CkptTensor t{"F32", shape, std::vector<uint8_t>(n * 4)};
    for (uint64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(gen());
      std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
    ck[(c.multimodal ? "model.language_model." : "model.") + name] = std::move(t);
  };
  auto normal = [&](double std, double mean = 0.0) { return [&, std, mean] { return mean + std * nd(rng); }; };
  const double H = c.hidden;
  put("embed_tokens.weight", {uint64_t(c.vocab), uint64_t(c.hidden)}, normal(1.0));
  put("norm.weight", {uint64_t(c.hidden)}, normal(0.2));
  const int kd = c.k_heads * c.dk, vd = c.v_heads * c.dv, cch = 2 * kd + vd;
  for (size_t il = 0; il < c.layers.size(); ++il) {
    const std::string p = "layers." + std::to_string(il) + ".";
    put(p + "input_layernorm.weight", {uint64_t(c.hidden)}, normal(0.2));
    put(p + "post_attention_layernorm.weight", {uint64_t(c.hidden)}, normal(0.2));
    if (c.layers[il] == "linear_attention") {
      const std::string a = p + "linear_attn.";
      put(a + "in_proj_qkv.weight", {uint64_t(cch), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "in_proj_z.weight", {uint64_t(vd), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "in_proj_b.weight", {uint64_t(c.v_heads), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "in_proj_a.weight", {uint64_t(c.v_heads), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "conv1d.weight", {uint64_t(cch), 1, uint64_t(c.conv)}, normal(0.5));
      put(a + "dt_bias", {uint64_t(c.v_heads)}, normal(0.5));
      put(a + "A_log", {uint64_t(c.v_heads)}, [&] { return std::log(0.02 + 0.58 * ud(rng)); });
      put(a + "norm.weight", {uint64_t(c.dv)}, normal(0.2, 1.0));
      put(a + "out_proj.weight", {uint64_t(c.hidden), uint64_t(vd)}, normal(1.0 / std::sqrt(double(vd))));
    } else {
      const std::string a = p + "self_attn.";
      const int q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
      put(a + "q_proj.weight", {uint64_t(2 * q), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "k_proj.weight", {uint64_t(kv), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "v_proj.weight", {uint64_t(kv), uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
      put(a + "o_proj.weight", {uint64_t(c.hidden), uint64_t(q)}, normal(1.0 / std::sqrt(double(q))));
      put(a + "q_norm.weight", {uint64_t(c.head_dim)}, normal(0.2));
      put(a + "k_norm.weight", {uint64_t(c.head_dim)}, normal(0.2));
    }
    const std::string m = p + "mlp.";
    put(m + "gate.weight", {uint64_t(c.experts), uint64_t(c.hidden)}, normal(3.0 / std::sqrt(H)));
    if (c.per_expert) {
      for (int e = 0; e < c.experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        put(x + "gate_proj.weight", {uint64_t(c.expert_ff), uint64_t(c.hidden)}, normal(2.0 / std::sqrt(H)));
        put(x + "up_proj.weight", {uint64_t(c.expert_ff), uint64_t(c.hidden)}, normal(2.0 / std::sqrt(H)));
        put(x + "down_proj.weight", {uint64_t(c.hidden), uint64_t(c.expert_ff)}, normal(1.0 / std::sqrt(double(c.expert_ff))));
      }
    } else {
      put(m + "experts.gate_up_proj", {uint64_t(c.experts), uint64_t(2 * c.expert_ff), uint64_t(c.hidden)},
          normal(2.0 / std::sqrt(H)));
      put(m + "experts.down_proj", {uint64_t(c.experts), uint64_t(c.hidden), uint64_t(c.expert_ff)},
          normal(1.0 / std::sqrt(double(c.expert_ff))));
    }
    if (c.shared_ff > 0) {
      put(m + "shared_expert.gate_proj.weight", {uint64_t(c.shared_ff), uint64_t(c.hidden)}, normal(1.5 / std::sqrt(H)));
      put(m + "shared_expert.up_proj.weight", {uint64_t(c.shared_ff), uint64_t(c.hidden)}, normal(1.5 / std::sqrt(H)));
      put(m + "shared_expert.down_proj.weight", {uint64_t(c.hidden), uint64_t(c.shared_ff)},
          normal(1.0 / std::sqrt(double(c.shared_ff))));
      put(m + "shared_expert_gate.weight", {1, uint64_t(c.hidden)}, normal(1.0 / std::sqrt(H)));
    }
  }
  {
    CkptTensor t{"F32", {uint64_t(c.vocab), uint64_t(c.hidden)}, std::vector<uint8_t>(size_t(c.vocab) * c.hidden * 4)};
    for (size_t i = 0; i < size_t(c.vocab) * c.hidden; ++i) {
      const float v = static_cast<float>(nd(rng) / std::sqrt(H));
      std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
    ck["lm_head.weight"] = std::move(t);
  }
  if (c.multimodal)
    for (const char* extra : {"model.visual.patch_embed.proj.weight", "mtp.fc.weight"})
      ck[extra] = CkptTensor{"F32", {4, 8}, std::vector<uint8_t>(4 * 8 * 4)};
  write_ckpt(dir + "/model.safetensors", ck);

  const int n_freq = c.head_dim / 4 / 2;
  nlohmann::json cfg = {
      {"architectures", {"Qwen3_5MoeForCausalLM"}},
      {"model_type", "qwen3_5_moe_text"},
      {"vocab_size", c.vocab},
      {"hidden_size", c.hidden},
      {"num_hidden_layers", c.layers.size()},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim},
      {"linear_conv_kernel_dim", c.conv},
      {"linear_key_head_dim", c.dk},
      {"linear_value_head_dim", c.dv},
      {"linear_num_key_heads", c.k_heads},
      {"linear_num_value_heads", c.v_heads},
      {"num_experts", c.experts},
      {"num_experts_per_tok", c.top_k},
      {"moe_intermediate_size", c.expert_ff},
      {"shared_expert_intermediate_size", c.shared_ff},
      {"layer_types", c.layers},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 4096},
      {"tie_word_embeddings", false},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"rope_parameters",
       {{"rope_type", "default"},
        {"rope_theta", c.rope_theta},
        {"partial_rotary_factor", 0.25},
        {"mrope_section", {n_freq - 2 * (n_freq / 3), n_freq / 3, n_freq / 3}},
        {"mrope_interleaved", true}}},
  };
  if (c.multimodal) {
    cfg.erase("architectures");
    cfg = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
           {"model_type", "qwen3_5_moe"},
           {"tie_word_embeddings", false},
           {"text_config", cfg},
           {"vision_config", {{"depth", 1}, {"hidden_size", 8}}}};
  }
  std::ofstream(dir + "/config.json") << cfg.dump(1);
}

}  // namespace ds4::test
