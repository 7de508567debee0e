// HF -> GGUF name mapping (expected names from spec §3) and config.json parsing in both
// dialects (official legacy fields; transformers' save_pretrained output).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "convert/gguf_layout.h"
#include "convert/hf_config.h"
#include "convert/hf_names.h"
#include "core/error.h"

using ds4::convert::map_hf_name;
using ds4::convert::MappedName;
using Kind = MappedName::Kind;

namespace {
std::string g(const char* hf) { return map_hf_name(hf).gguf; }
}  // namespace

TEST(ConvertNames, OfficialCheckpointNames) {
  EXPECT_EQ(g("embed.weight"), "token_embd.weight");
  EXPECT_EQ(g("head.weight"), "output.weight");
  EXPECT_EQ(g("norm.weight"), "output_norm.weight");
  EXPECT_EQ(g("hc_head_fn"), "output_hc_fn.weight");
  EXPECT_EQ(g("hc_head_base"), "output_hc_base.weight");
  EXPECT_EQ(g("hc_head_scale"), "output_hc_scale.weight");
  EXPECT_EQ(g("layers.7.hc_attn_fn"), "blk.7.hc_attn_fn.weight");
  EXPECT_EQ(g("layers.7.hc_ffn_scale"), "blk.7.hc_ffn_scale.weight");
  EXPECT_EQ(g("layers.0.attn_norm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(g("layers.0.ffn_norm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(g("layers.3.attn.wq_a.weight"), "blk.3.attn_q_a.weight");
  EXPECT_EQ(g("layers.3.attn.q_norm.weight"), "blk.3.attn_q_a_norm.weight");
  EXPECT_EQ(g("layers.3.attn.wq_b.weight"), "blk.3.attn_q_b.weight");
  EXPECT_EQ(g("layers.3.attn.wkv.weight"), "blk.3.attn_kv.weight");
  EXPECT_EQ(g("layers.3.attn.kv_norm.weight"), "blk.3.attn_kv_a_norm.weight");
  EXPECT_EQ(g("layers.3.attn.attn_sink"), "blk.3.attn_sinks.weight");
  EXPECT_EQ(g("layers.3.attn.wo_a.weight"), "blk.3.attn_output_a.weight");
  EXPECT_EQ(g("layers.3.attn.wo_b.weight"), "blk.3.attn_output_b.weight");
  EXPECT_EQ(g("layers.42.attn.compressor.ape"), "blk.42.attn_compressor_ape.weight");
  EXPECT_EQ(g("layers.42.attn.compressor.wkv.weight"), "blk.42.attn_compressor_kv.weight");
  EXPECT_EQ(g("layers.42.attn.compressor.wgate.weight"), "blk.42.attn_compressor_gate.weight");
  EXPECT_EQ(g("layers.42.attn.compressor.norm.weight"), "blk.42.attn_compressor_norm.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.wq_b.weight"), "blk.2.indexer.attn_q_b.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.weights_proj.weight"), "blk.2.indexer.proj.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.compressor.ape"), "blk.2.indexer_compressor_ape.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.compressor.wkv.weight"), "blk.2.indexer_compressor_kv.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.compressor.wgate.weight"), "blk.2.indexer_compressor_gate.weight");
  EXPECT_EQ(g("layers.2.attn.indexer.compressor.norm.weight"), "blk.2.indexer_compressor_norm.weight");
  EXPECT_EQ(g("layers.5.ffn.gate.weight"), "blk.5.ffn_gate_inp.weight");
  EXPECT_EQ(g("layers.5.ffn.gate.bias"), "blk.5.exp_probs_b.bias");
  EXPECT_EQ(g("layers.1.ffn.gate.tid2eid"), "blk.1.ffn_gate_tid2eid.weight");
  EXPECT_EQ(g("layers.5.ffn.shared_experts.w1.weight"), "blk.5.ffn_gate_shexp.weight");
  EXPECT_EQ(g("layers.5.ffn.shared_experts.w3.weight"), "blk.5.ffn_up_shexp.weight");
  EXPECT_EQ(g("layers.5.ffn.shared_experts.w2.weight"), "blk.5.ffn_down_shexp.weight");
  auto e = map_hf_name("layers.9.ffn.experts.255.w3.weight");
  EXPECT_EQ(e.kind, Kind::Expert);
  EXPECT_EQ(e.expert, 255);
  EXPECT_EQ(e.layer, 9);
  EXPECT_EQ(e.gguf, "blk.9.ffn_up_exps.weight");
  EXPECT_EQ(g("layers.9.ffn.experts.0.w1.weight"), "blk.9.ffn_gate_exps.weight");
  EXPECT_EQ(g("layers.9.ffn.experts.0.w2.weight"), "blk.9.ffn_down_exps.weight");
}

TEST(ConvertNames, SavePretrainedAndModuleNames) {
  // transformers 5.17 save_pretrained output (see tests/fixtures/deepseek4/README.md).
  EXPECT_EQ(g("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(g("model.hc_head.hc_fn"), "output_hc_fn.weight");
  EXPECT_EQ(g("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(g("model.layers.1.attn.norm.weight"), "blk.1.attn_kv_a_norm.weight");
  EXPECT_EQ(g("model.layers.1.attn.compressor.norm.weight"), "blk.1.attn_compressor_norm.weight");
  EXPECT_EQ(g("model.layers.1.ffn.experts.3.w1.weight"), "blk.1.ffn_gate_exps.weight");
  // transformers module names.
  EXPECT_EQ(g("lm_head.weight"), "output.weight");
  EXPECT_EQ(g("model.layers.4.self_attn.q_a_proj.weight"), "blk.4.attn_q_a.weight");
  EXPECT_EQ(g("model.layers.4.self_attn.compressor.indexer.scorer.weights_proj.weight"), "blk.4.indexer.proj.weight");
  EXPECT_EQ(g("model.layers.4.self_attn.compressor.indexer.position_bias"), "blk.4.indexer_compressor_ape.weight");
  EXPECT_EQ(g("model.layers.4.mlp.gate.e_score_correction_bias"), "blk.4.exp_probs_b.bias");
  EXPECT_EQ(g("model.layers.4.attn_hc.fn"), "blk.4.hc_attn_fn.weight");
  EXPECT_EQ(g("model.layers.4.attn_hc.scale"), "blk.4.hc_attn_scale.weight");  // not an FP8 scale
  EXPECT_EQ(g("model.layers.4.ffn_hc.scale"), "blk.4.hc_ffn_scale.weight");
  EXPECT_EQ(map_hf_name("model.layers.4.mlp.experts.gate_up_proj").kind, Kind::GateUpStack);
  EXPECT_EQ(map_hf_name("model.layers.4.mlp.experts.down_proj").kind, Kind::DownStack);
  EXPECT_EQ(map_hf_name("mtp.0.enorm.weight").kind, Kind::Ignored);
}

TEST(ConvertNames, RejectsForeignAndQuantizedNames) {
  EXPECT_THROW(map_hf_name("model.layers.0.mlp.up_proj.weight"), ds4::Error);
  EXPECT_THROW(map_hf_name("transformer.h.0.attn.weight"), ds4::Error);
  EXPECT_THROW(map_hf_name("layers.x.attn.wq_a.weight"), ds4::Error);
  EXPECT_THROW(map_hf_name("layers.3.attn.bogus.scale"), ds4::Error);  // a scale of nothing we know
}

// The official release's FP8/FP4 block scales name the weight they scale.
TEST(ConvertNames, MapsBlockScalesToTheirWeights) {
  auto s = map_hf_name("layers.3.attn.wq_a.scale");
  EXPECT_EQ(s.kind, Kind::Scale);
  EXPECT_EQ(s.gguf, "blk.3.attn_q_a.weight");
  s = map_hf_name("model.layers.2.ffn.shared_experts.w2.weight_scale_inv");
  EXPECT_EQ(s.kind, Kind::Scale);
  EXPECT_EQ(s.gguf, "blk.2.ffn_down_shexp.weight");
  s = map_hf_name("layers.3.ffn.experts.1.w1.scale");
  EXPECT_EQ(s.kind, Kind::ExpertScale);
  EXPECT_EQ(s.gguf, "blk.3.ffn_gate_exps.weight");
  EXPECT_EQ(s.expert, 1);
  EXPECT_EQ(map_hf_name("mtp.0.attn.wq_a.scale").kind, Kind::Ignored);
  try {
    map_hf_name("layers.3.attn.bogus.scale");
    ADD_FAILURE() << "no error";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("looks like a block scale"), std::string::npos) << e.what();
  }
}

// The official Flash config.json (legacy fields), as published.
static const char* kFlashConfig = R"({
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
  "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": 43,
  "num_attention_heads": 64, "num_key_value_heads": 1, "n_routed_experts": 256, "n_shared_experts": 1,
  "num_experts_per_tok": 6, "max_position_embeddings": 1048576, "rms_norm_eps": 1e-6, "rope_theta": 10000,
  "q_lora_rank": 1024, "qk_rope_head_dim": 64, "head_dim": 512,
  "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
                      4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0],
  "sliding_window": 128, "compress_rope_theta": 160000, "o_lora_rank": 1024, "o_groups": 8,
  "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "num_hash_layers": 3, "hc_mult": 4,
  "hc_eps": 1e-6, "hc_sinkhorn_iters": 20, "swiglu_limit": 10.0, "routed_scaling_factor": 1.5,
  "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true,
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
  "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": false
})";

TEST(ConvertConfig, OfficialFlashConfigGivesTheFlashShape) {
  auto s = ds4::convert::parse_hf_config(nlohmann::json::parse(kFlashConfig), "config.json");
  auto f = ds4::convert::flash_shape(43);
  EXPECT_EQ(s.n_layers, 43u);
  EXPECT_EQ(s.compress_ratios, f.compress_ratios);  // 43 of the 44 entries; trailing MTP 0 dropped
  EXPECT_EQ(s.compress_ratios[2], 4u);
  EXPECT_EQ(s.compress_ratios[3], 128u);
  EXPECT_EQ(s.compress_ratios[42], 4u);
  EXPECT_EQ(s.n_hash_layers, 3u);
  EXPECT_EQ(s.rope_dim, 64u);
  EXPECT_TRUE(s.yarn.enabled);
  EXPECT_EQ(s.yarn.factor, 16.0);
  EXPECT_EQ(s.yarn.original_context, 65536u);
  EXPECT_EQ(s.yarn.beta_fast, 32.0);
  EXPECT_EQ(s.yarn.beta_slow, 1.0);
  EXPECT_EQ(s.compress_rope_base, 160000.0);
  EXPECT_EQ(s.hidden, 4096u);
  EXPECT_EQ(s.expert_ffn, 2048u);
  EXPECT_EQ(s.indexer_top_k, 512u);
  EXPECT_EQ(*s.bos_id, 0u);
  EXPECT_EQ(*s.eos_id, 1u);
}

TEST(ConvertConfig, SavePretrainedFixtureConfig) {
  auto s = ds4::convert::read_hf_config(std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom/config.json");
  EXPECT_EQ(s.n_layers, 3u);
  EXPECT_EQ(s.compress_ratios, (std::vector<uint32_t>{0, 4, 128}));
  EXPECT_EQ(s.n_hash_layers, 2u);  // mlp_layer_types = hash_moe, hash_moe, moe
  EXPECT_EQ(s.rope_dim, 64u);      // qk_rope_head_dim 64 (= 0.125 x 512)
  EXPECT_EQ(s.head_dim, 512u);
  EXPECT_TRUE(s.yarn.enabled);
  EXPECT_EQ(s.yarn.factor, 16.0);
  EXPECT_EQ(s.sliding_window, 128u);
  auto t = ds4::convert::read_hf_config(std::string(DS4_FIXTURES_DIR) + "/deepseek4/swa_tiny/config.json");
  EXPECT_FALSE(t.yarn.enabled);
  EXPECT_EQ(t.yarn.factor, 1.0);
  EXPECT_EQ(t.rope_dim, 8u);  // partial_rotary_factor 0.25 x head_dim 32
  EXPECT_EQ(t.n_hash_layers, 1u);
}

TEST(ConvertConfig, RejectsWhatTheLayoutCannotExpress) {
  auto base = nlohmann::json::parse(kFlashConfig);
  auto expect_bad = [&](nlohmann::json j, const std::string& needle) {
    try {
      ds4::convert::parse_hf_config(j, "cfg.json");
      FAIL() << "accepted; expected " << needle;
    } catch (const ds4::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto j = base;
  j.erase("compress_ratios");
  expect_bad(j, "refusing to guess");
  j = base;
  j["compress_ratios"] = {0, 4};
  expect_bad(j, "2 entries for 43 layers");
  j = base;
  j["num_key_value_heads"] = 8;
  expect_bad(j, "num_key_value_heads");
  j = base;
  j["scoring_func"] = "softmax";
  expect_bad(j, "sqrtsoftplus");
  j = base;
  j["hidden_size"] = "4096";
  expect_bad(j, "hidden_size");
  j = base;
  j.erase("num_hash_layers");
  j["mlp_layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 43; ++i) j["mlp_layer_types"].push_back(i == 5 ? "hash_moe" : "moe");
  expect_bad(j, "must come first");
  j = base;
  j["rope_scaling"]["type"] = "linear";
  expect_bad(j, "not supported");
}

TEST(ConvertLayout, RecipesChooseSpecTypes) {
  auto s = ds4::convert::flash_shape(4);
  auto plan = ds4::convert::plan_tensors(s, ds4::convert::Recipe::FlashQ2);
  auto type_of = [&](const std::string& n) {
    for (const auto& p : plan)
      if (p.name == n) return p.type;
    ADD_FAILURE() << "no " << n;
    return ds4::GgmlType::F32;
  };
  EXPECT_EQ(type_of("blk.3.ffn_gate_exps.weight"), ds4::GgmlType::IQ2_XXS);
  EXPECT_EQ(type_of("blk.3.ffn_down_exps.weight"), ds4::GgmlType::Q2_K);
  EXPECT_EQ(type_of("blk.3.attn_q_b.weight"), ds4::GgmlType::Q8_0);
  EXPECT_EQ(type_of("blk.2.indexer.proj.weight"), ds4::GgmlType::F16);
  EXPECT_EQ(type_of("blk.0.ffn_gate_tid2eid.weight"), ds4::GgmlType::I32);
  // A model whose expert rows cannot hold K-quant blocks is refused, not silently changed.
  auto small = ds4::convert::read_hf_config(std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom/config.json");
  EXPECT_THROW(ds4::convert::plan_tensors(small, ds4::convert::Recipe::FlashQ4), ds4::Error);
  auto q8 = ds4::convert::plan_tensors(small, ds4::convert::Recipe::Q8_0);
  for (const auto& p : q8)
    if (p.name == "blk.0.ffn_down_exps.weight") EXPECT_EQ(p.type, ds4::GgmlType::Q8_0);  // ne0 = 32
}
