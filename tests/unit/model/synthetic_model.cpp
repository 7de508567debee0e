#include "synthetic_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gguf/gguf.h"
#include "quant/quant.h"

namespace ds4::test {

SynthConfig SynthConfig::flash(int64_t n_layer) {
  SynthConfig c;
  c.n_layer = n_layer;
  c.n_embd = 4096;
  c.n_vocab = 129280;
  c.n_head = 64;
  c.head_dim = 512;
  c.n_rot = 64;
  c.q_lora_rank = 1024;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.sliding_window = 128;
  c.compress_ratios.clear();
  for (int64_t il = 0; il < n_layer; ++il) c.compress_ratios.push_back(il < 2 ? 0 : (il % 2 == 0 ? 4 : 128));
  c.compress_ratios.push_back(0);  // the MTP entry (44 for the full model)
  c.indexer_n_head = 64;
  c.indexer_head_dim = 128;
  c.indexer_top_k = 512;
  c.n_expert = 256;
  c.n_expert_used = 6;
  c.expert_ff = 2048;
  c.n_expert_shared = 1;
  c.n_hash_layers = std::min<int64_t>(3, n_layer);
  c.n_hc = 4;
  c.dense_type = GgmlType::Q8_0;
  c.small_type = GgmlType::F16;
  c.expert_gate_up_type.assign(static_cast<size_t>(n_layer), GgmlType::IQ2_XXS);
  c.expert_down_type.assign(static_cast<size_t>(n_layer), GgmlType::Q2_K);
  return c;
}

namespace {

struct PendingTensor {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
  float sd;       // normal(mean, sd) values for float tensors
  float mean;
  std::vector<int32_t> i32;  // for I32 tensors
};

}  // namespace

void write_synthetic_model(const std::string& path, const SynthConfig& c) {
  using gguf::Value;
  using gguf::ValueType;
  std::vector<PendingTensor> ts;
  const uint64_t d = static_cast<uint64_t>(c.n_embd), hc = static_cast<uint64_t>(c.n_hc);
  const uint64_t n_mix = (2 + hc) * hc;
  auto add = [&](std::string name, GgmlType t, std::vector<uint64_t> ne, float sd, float mean = 0.0f) {
    ts.push_back({std::move(name), t, std::move(ne), sd, mean, {}});
  };
  auto mat = [&](std::string name, GgmlType t, uint64_t n_in, uint64_t n_out) {
    add(std::move(name), t, {n_in, n_out}, 1.0f / std::sqrt(static_cast<float>(n_in)));
  };
  auto vec = [&](std::string name, uint64_t n, float sd, float mean) { add(std::move(name), GgmlType::F32, {n}, sd, mean); };

  mat("token_embd.weight", c.small_type, d, static_cast<uint64_t>(c.n_vocab));
  mat("output_hc_fn.weight", c.small_type, hc * d, hc);
  vec("output_hc_base.weight", hc, 0.5f, 0.0f);
  vec("output_hc_scale.weight", 1, 0.2f, 1.0f);
  vec("output_norm.weight", d, 0.1f, 1.0f);
  mat("output.weight", c.dense_type, d, static_cast<uint64_t>(c.n_vocab));

  std::mt19937 rng(c.seed);
  const uint64_t hd = static_cast<uint64_t>(c.head_dim);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    auto n = [il](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    const int64_t R = c.compress_ratios[static_cast<size_t>(il)];
    for (const char* part : {"attn", "ffn"}) {
      mat(n(fmt::format("hc_{}_fn.weight", part).c_str()), c.small_type, hc * d, n_mix);
      vec(n(fmt::format("hc_{}_base.weight", part).c_str()), n_mix, 0.5f, 0.0f);
      vec(n(fmt::format("hc_{}_scale.weight", part).c_str()), 3, 0.2f, 1.0f);
    }
    vec(n("attn_norm.weight"), d, 0.1f, 1.0f);
    mat(n("attn_q_a.weight"), c.dense_type, d, static_cast<uint64_t>(c.q_lora_rank));
    vec(n("attn_q_a_norm.weight"), static_cast<uint64_t>(c.q_lora_rank), 0.1f, 1.0f);
    mat(n("attn_q_b.weight"), c.dense_type, static_cast<uint64_t>(c.q_lora_rank), static_cast<uint64_t>(c.n_head) * hd);
    mat(n("attn_kv.weight"), c.dense_type, d, hd);
    vec(n("attn_kv_a_norm.weight"), hd, 0.1f, 1.0f);
    vec(n("attn_sinks.weight"), static_cast<uint64_t>(c.n_head), 1.0f, 0.0f);
    mat(n("attn_output_a.weight"), c.dense_type, static_cast<uint64_t>(c.n_head / c.o_groups) * hd,
        static_cast<uint64_t>(c.o_groups * c.o_lora_rank));
    mat(n("attn_output_b.weight"), c.dense_type, static_cast<uint64_t>(c.o_groups * c.o_lora_rank), d);
    if (R > 0) {
      const uint64_t W = (R == 4 ? 2 : 1) * hd;
      add(n("attn_compressor_ape.weight"), c.small_type, {W, static_cast<uint64_t>(R)}, 0.5f);
      mat(n("attn_compressor_kv.weight"), c.small_type, d, W);
      mat(n("attn_compressor_gate.weight"), c.small_type, d, W);
      vec(n("attn_compressor_norm.weight"), hd, 0.1f, 1.0f);
    }
    if (R == 4) {
      const uint64_t id = static_cast<uint64_t>(c.indexer_head_dim), nh = static_cast<uint64_t>(c.indexer_n_head);
      mat(n("indexer.attn_q_b.weight"), c.small_type, static_cast<uint64_t>(c.q_lora_rank), nh * id);
      mat(n("indexer.proj.weight"), c.small_type, d, nh);
      add(n("indexer_compressor_ape.weight"), c.small_type, {2 * id, 4}, 0.5f);
      mat(n("indexer_compressor_kv.weight"), c.small_type, d, 2 * id);
      mat(n("indexer_compressor_gate.weight"), c.small_type, d, 2 * id);
      vec(n("indexer_compressor_norm.weight"), id, 0.1f, 1.0f);
    }
    for (const char* part : {"ffn_norm.weight"}) vec(n(part), d, 0.1f, 1.0f);
    mat(n("ffn_gate_inp.weight"), c.small_type, d, static_cast<uint64_t>(c.n_expert));
    if (il < c.n_hash_layers) {
      PendingTensor t{n("ffn_gate_tid2eid.weight"), GgmlType::I32,
                      {static_cast<uint64_t>(c.n_expert_used), static_cast<uint64_t>(c.n_vocab)}, 0, 0, {}};
      // Distinct random experts per token (a partial Fisher-Yates shuffle per row).
      std::vector<int32_t> perm(static_cast<size_t>(c.n_expert));
      for (int64_t v = 0; v < c.n_vocab; ++v) {
        for (int64_t e = 0; e < c.n_expert; ++e) perm[e] = static_cast<int32_t>(e);
        for (int64_t k = 0; k < c.n_expert_used; ++k) {
          std::swap(perm[k], perm[k + rng() % (c.n_expert - k)]);
          t.i32.push_back(perm[k]);
        }
      }
      if (c.edit_i32) c.edit_i32(t.name, t.i32);
      ts.push_back(std::move(t));
    } else {
      vec(n("exp_probs_b.bias"), static_cast<uint64_t>(c.n_expert), 0.3f, 0.0f);
    }
    auto pick = [&](const std::vector<GgmlType>& v) { return v.empty() ? GgmlType::F32 : v[static_cast<size_t>(il)]; };
    const uint64_t ff = static_cast<uint64_t>(c.expert_ff), E = static_cast<uint64_t>(c.n_expert);
    // Expert weights a bit larger than 1/sqrt(n) so some gate/up values reach the clamp.
    add(n("ffn_gate_exps.weight"), pick(c.expert_gate_up_type), {d, ff, E}, 3.0f / std::sqrt(static_cast<float>(d)));
    add(n("ffn_up_exps.weight"), pick(c.expert_gate_up_type), {d, ff, E}, 3.0f / std::sqrt(static_cast<float>(d)));
    add(n("ffn_down_exps.weight"), pick(c.expert_down_type), {ff, d, E}, 1.0f / std::sqrt(static_cast<float>(ff)));
    const uint64_t sff = ff * static_cast<uint64_t>(c.n_expert_shared);
    mat(n("ffn_gate_shexp.weight"), c.dense_type, d, sff);
    mat(n("ffn_up_shexp.weight"), c.dense_type, d, sff);
    mat(n("ffn_down_shexp.weight"), c.dense_type, sff, d);
  }

  gguf::Writer w(path);
  auto kv = [&](const std::string& key, Value v) {
    if (key != c.drop_key) w.add_kv(key, std::move(v));
  };
  auto u32 = [](int64_t x) { return Value::u32(static_cast<uint32_t>(x)); };
  const std::string A = "deepseek4.";
  kv("general.architecture", Value::string("deepseek4"));
  kv("general.name", Value::string("synthetic"));
  kv(A + "block_count", u32(c.n_layer));
  kv(A + "embedding_length", u32(c.n_embd));
  kv(A + "vocab_size", u32(c.n_vocab));
  kv(A + "context_length", u32(1048576));
  kv(A + "attention.head_count", u32(c.n_head));
  kv(A + "attention.head_count_kv", u32(1));
  kv(A + "attention.key_length", u32(c.head_dim));
  kv(A + "attention.value_length", u32(c.head_dim));
  kv(A + "rope.dimension_count", u32(c.n_rot));
  kv(A + "attention.q_lora_rank", u32(c.q_lora_rank));
  kv(A + "attention.output_group_count", u32(c.o_groups));
  kv(A + "attention.output_lora_rank", u32(c.o_lora_rank));
  kv(A + "attention.sliding_window", u32(c.sliding_window));
  std::vector<Value> ratios;
  for (int64_t r : c.ratios_key.empty() ? c.compress_ratios : c.ratios_key) ratios.push_back(Value::i32(static_cast<int32_t>(r)));
  kv(A + "attention.compress_ratios", Value::array(ValueType::I32, ratios));
  kv(A + "attention.indexer.head_count", u32(c.indexer_n_head));
  kv(A + "attention.indexer.key_length", u32(c.indexer_head_dim));
  kv(A + "attention.indexer.top_k", u32(c.indexer_top_k));
  kv(A + "expert_count", u32(c.n_expert));
  kv(A + "expert_used_count", u32(c.n_expert_used));
  kv(A + "expert_feed_forward_length", u32(c.expert_ff));
  kv(A + "expert_shared_count", u32(c.n_expert_shared));
  kv(A + "hash_layer_count", u32(c.hash_layer_key >= 0 ? c.hash_layer_key : c.n_hash_layers));
  kv(A + "expert_weights_norm", Value::boolean(true));
  kv(A + "expert_weights_scale", Value::f32(1.5f));
  kv(A + "expert_gating_func", u32(c.gating_func));
  std::vector<Value> clamp(static_cast<size_t>(c.n_layer), Value::f32(10.0f));
  kv(A + "swiglu_clamp_exp", Value::array(ValueType::F32, clamp));
  kv(A + "hyper_connection.count", u32(c.n_hc));
  kv(A + "hyper_connection.sinkhorn_iterations", u32(20));
  kv(A + "hyper_connection.epsilon", Value::f32(1e-6f));
  kv(A + "attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  kv(A + "rope.freq_base", Value::f32(10000.0f));
  kv(A + "attention.compress_rope_freq_base", Value::f32(160000.0f));
  if (c.yarn) {
    kv(A + "rope.scaling.factor", Value::f32(16.0f));
    kv(A + "rope.scaling.original_context_length", u32(65536));
    kv(A + "rope.scaling.yarn_beta_fast", Value::f32(32.0f));
    kv(A + "rope.scaling.yarn_beta_slow", Value::f32(1.0f));
  }

  std::vector<PendingTensor*> kept;
  for (auto& t : ts) {
    if (t.name == c.drop_tensor) continue;
    if (auto it = c.type_override.find(t.name); it != c.type_override.end()) t.type = it->second;
    if (auto it = c.shape_override.find(t.name); it != c.shape_override.end()) t.ne = it->second;
    w.add_tensor(t.name, t.type, t.ne);
    kept.push_back(&t);
  }
  w.write_header();
  std::vector<float> vals;
  std::vector<uint8_t> bytes;
  for (PendingTensor* t : kept) {
    const auto& tr = traits(t->type);
    uint64_t n_el = 1;
    for (uint64_t x : t->ne) n_el *= x;
    const uint64_t n_bytes = n_el / tr.block_elems * tr.block_bytes;
    if (c.hole_above_bytes && n_bytes > c.hole_above_bytes) {
      w.skip_tensor_data(n_bytes);
      continue;
    }
    if (t->type == GgmlType::I32) {
      w.write_tensor_data({reinterpret_cast<const uint8_t*>(t->i32.data()), t->i32.size() * sizeof(int32_t)});
      continue;
    }
    vals.resize(n_el);
    std::normal_distribution<float> g(t->mean, t->sd);
    for (auto& v : vals) v = g(rng);
    bytes.resize(n_bytes);
    const int64_t n_per_row = static_cast<int64_t>(t->ne[0]);
    // IQ2_XXS needs importance weights; uniform ones are the neutral choice.
    std::vector<float> imatrix(t->type == GgmlType::IQ2_XXS ? static_cast<size_t>(n_per_row) : 0, 1.0f);
    quant::quantize_rows(t->type, vals.data(), bytes.data(), static_cast<int64_t>(n_el) / n_per_row, n_per_row,
                         imatrix.empty() ? nullptr : imatrix.data());
    w.write_tensor_data(bytes);
  }
  w.finish();
}

}  // namespace ds4::test
