// GGUF metadata for deepseek4 files. Key names: spec §1 table; value types as the published
// files store them (u32 counts, f32 floats, i32 ratio array, f32 clamp array).
#include "convert/metadata.h"

#include <algorithm>

#include "core/error.h"
#include "ds4/tokenizer.h"
#include "tokenizer/byte_level.h"

namespace ds4::convert {

using gguf::Value;
using gguf::ValueType;

namespace {

// Unused filler text, the same as tokenizer::vocab_from_hf_json uses for gaps in the id space.
std::string pad_token(uint32_t id) { return fmt::format("[PAD{}]", id); }

void pad_to(tokenizer::Vocab& v, uint32_t vocab_size) {
  for (uint32_t id = static_cast<uint32_t>(v.tokens.size()); id < vocab_size; ++id) {
    v.tokens.push_back(pad_token(id));
    v.types.push_back(tokenizer::TokenType::Unused);
  }
}

}  // namespace

tokenizer::Vocab byte_vocab(uint32_t vocab_size) {
  const auto& bl = tokenizer::ByteLevel::get();
  tokenizer::Vocab v;
  for (uint32_t b = 0; b < std::min<uint32_t>(vocab_size, 256); ++b) {
    v.tokens.push_back(bl.byte_to_utf8[b]);
    v.types.push_back(tokenizer::TokenType::Normal);
  }
  pad_to(v, vocab_size);
  return v;
}

tokenizer::Vocab vocab_from_tokenizer_json(const std::string& path, uint32_t vocab_size) {
  tokenizer::Vocab v = tokenizer::vocab_from_hf_json(path, /*v4_specials=*/false);
  // The embedding has vocab_size rows; a token beyond them could be produced but not embedded.
  if (v.tokens.size() > vocab_size)
    fail("{}: token '{}' has id {}, beyond vocab_size {} of config.json", path, v.tokens.back(),
         v.tokens.size() - 1, vocab_size);
  pad_to(v, vocab_size);
  return v;
}

void add_model_metadata(gguf::Writer& w, const ModelShape& s) {
  const std::string a = "deepseek4.";
  auto u32 = [&](const std::string& k, uint64_t x) {
    if (x > UINT32_MAX) fail("metadata {}{} = {} does not fit u32", a, k, x);
    w.add_kv(a + k, Value::u32(static_cast<uint32_t>(x)));
  };
  auto f32 = [&](const std::string& k, double x) { w.add_kv(a + k, Value::f32(static_cast<float>(x))); };

  w.add_kv("general.architecture", Value::string("deepseek4"));
  w.add_kv("general.name", Value::string(s.name.empty() ? "deepseek4" : s.name));
  u32("block_count", s.n_layers);
  u32("context_length", std::min<uint64_t>(s.context_length, UINT32_MAX));
  u32("embedding_length", s.hidden);
  u32("vocab_size", s.vocab);
  u32("attention.head_count", s.n_heads);
  u32("attention.head_count_kv", 1);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  u32("rope.dimension_count", s.rope_dim);
  u32("attention.q_lora_rank", s.q_lora_rank);
  u32("attention.output_group_count", s.o_groups);
  u32("attention.output_lora_rank", s.o_lora_rank);
  u32("attention.sliding_window", s.sliding_window);
  std::vector<Value> ratios, clamps;
  for (uint32_t c : s.compress_ratios) ratios.push_back(Value::i32(static_cast<int32_t>(c)));
  // llama.cpp wants exactly block_count clamp entries (spec §1).
  for (uint32_t il = 0; il < s.n_layers; ++il) clamps.push_back(Value::f32(static_cast<float>(s.swiglu_limit)));
  w.add_kv(a + "attention.compress_ratios", Value::array(ValueType::I32, std::move(ratios)));
  u32("attention.indexer.head_count", s.indexer_heads);
  u32("attention.indexer.key_length", s.indexer_head_dim);
  u32("attention.indexer.top_k", s.indexer_top_k);
  u32("expert_count", s.n_experts);
  u32("expert_used_count", s.n_experts_used);
  u32("expert_feed_forward_length", s.expert_ffn);
  u32("expert_shared_count", 1);
  u32("hash_layer_count", s.n_hash_layers);
  w.add_kv(a + "expert_weights_norm", Value::boolean(s.expert_weights_norm));
  f32("expert_weights_scale", s.expert_weights_scale);
  u32("expert_gating_func", 4);  // llama.cpp: LLAMA_EXPERT_GATING_FUNC_TYPE_SQRTSOFTPLUS
  w.add_kv(a + "swiglu_clamp_exp", Value::array(ValueType::F32, std::move(clamps)));
  u32("hyper_connection.count", s.hc_mult);
  u32("hyper_connection.sinkhorn_iterations", s.hc_sinkhorn_iters);
  f32("hyper_connection.epsilon", s.hc_eps);
  f32("attention.layer_norm_rms_epsilon", s.rms_eps);
  f32("rope.freq_base", s.rope_base);
  f32("attention.compress_rope_freq_base", s.compress_rope_base);
  // Without YaRN the factor is 1, which makes the YaRN blend the identity (spec §5.1).
  if (s.yarn.enabled) w.add_kv(a + "rope.scaling.type", Value::string("yarn"));
  f32("rope.scaling.factor", s.yarn.enabled ? s.yarn.factor : 1.0);
  u32("rope.scaling.original_context_length", std::min<uint64_t>(s.yarn.original_context, UINT32_MAX));
  f32("rope.scaling.yarn_beta_fast", s.yarn.beta_fast);
  f32("rope.scaling.yarn_beta_slow", s.yarn.beta_slow);
}

void add_vocab_metadata(gguf::Writer& w, tokenizer::Vocab v, const ModelShape& s) {
  if (v.tokens.size() != s.vocab)
    fail("vocabulary has {} tokens, the model's vocab_size is {}", v.tokens.size(), s.vocab);
  if (s.bos_id) v.bos = static_cast<int32_t>(*s.bos_id);
  if (s.eos_id) v.eos = static_cast<int32_t>(*s.eos_id);
  v.validate("vocabulary for GGUF");
  // Build the tokenizer once, as `ds4-gguf vocab-from-hf` does: it refuses merges that name
  // unknown tokens, which would otherwise only surface when the GGUF is loaded.
  (void)Tokenizer::from_vocab(v, "vocabulary for GGUF");
  tokenizer::vocab_to_gguf(v, w);
}

}  // namespace ds4::convert
