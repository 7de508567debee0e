// GGUF metadata for deepseek4 files. Key names: spec §1 table; value types as the published
// files store them (u32 counts, f32 floats, i32 ratio array, f32 clamp array).
#include "convert/metadata.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ds4::convert {

using gguf::Value;
using gguf::ValueType;

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte -> code point of the GPT-2 byte-level BPE alphabet: printable bytes map to themselves,
// the other 68 to 256, 257, ... in byte order (spec §9.1).
uint32_t byte_code_point(uint32_t b) {
  auto printable = [](uint32_t x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (uint32_t x = 0; x < b; ++x)
    if (!printable(x)) ++n;
  return 256 + n;
}

std::string unused_token(uint32_t id) { return fmt::format("<|ds4_unused_{}|>", id); }

}  // namespace

Vocab byte_vocab(uint32_t vocab_size) {
  Vocab v;
  for (uint32_t i = 0; i < vocab_size; ++i) {
    if (i < 256) {
      v.tokens.push_back(utf8(byte_code_point(i)));
      v.token_types.push_back(1);
    } else {
      v.tokens.push_back(unused_token(i));
      v.token_types.push_back(5);
    }
  }
  return v;
}

Vocab vocab_from_tokenizer_json(const std::string& path, uint32_t vocab_size) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.contains("model") || !j["model"].is_object()) fail("{}: no 'model' object", path);
  const auto& m = j["model"];
  if (!m.contains("type") || m["type"] != "BPE") fail("{}: model.type is not \"BPE\"", path);
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model.vocab is not an object", path);

  Vocab v;
  v.tokens.assign(vocab_size, "");
  v.token_types.assign(vocab_size, 0);
  auto put = [&](const std::string& tok, const nlohmann::json& idj, int32_t type, const char* where) {
    if (!idj.is_number_unsigned()) fail("{}: {} '{}' has a non-integer id", path, where, tok);
    uint64_t id = idj.get<uint64_t>();
    if (id >= vocab_size) fail("{}: {} '{}' has id {}, beyond vocab_size {}", path, where, tok, id, vocab_size);
    v.tokens[id] = tok;
    v.token_types[id] = type;
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) put(it.key(), it.value(), 1, "model.vocab token");
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        fail("{}: malformed added_tokens entry {}", path, a.dump());
      bool special = a.value("special", false);
      put(a["content"].get<std::string>(), a["id"], special ? 3 : 4, "added token");
    }
  }
  for (uint32_t i = 0; i < vocab_size; ++i)
    if (v.token_types[i] == 0) {
      v.tokens[i] = unused_token(i);
      v.token_types[i] = 5;
    }
  if (m.contains("merges")) {
    if (!m["merges"].is_array()) fail("{}: model.merges is not an array", path);
    for (const auto& e : m["merges"]) {
      if (e.is_string()) {
        v.merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        v.merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
      } else {
        fail("{}: malformed merge {}", path, e.dump());
      }
    }
  }
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

void add_vocab_metadata(gguf::Writer& w, const Vocab& v, const ModelShape& s) {
  if (v.tokens.size() != s.vocab)
    fail("vocabulary has {} tokens, the model's vocab_size is {}", v.tokens.size(), s.vocab);
  w.add_kv("tokenizer.ggml.model", Value::string(v.model));
  w.add_kv("tokenizer.ggml.pre", Value::string(v.pre));
  w.add_kv("tokenizer.ggml.tokens", Value::string_array(v.tokens));
  std::vector<Value> types;
  types.reserve(v.token_types.size());
  for (int32_t t : v.token_types) types.push_back(Value::i32(t));
  w.add_kv("tokenizer.ggml.token_type", Value::array(ValueType::I32, std::move(types)));
  w.add_kv("tokenizer.ggml.merges", Value::string_array(v.merges));
  if (s.bos_id) w.add_kv("tokenizer.ggml.bos_token_id", Value::u32(*s.bos_id));
  if (s.eos_id) w.add_kv("tokenizer.ggml.eos_token_id", Value::u32(*s.eos_id));
}

}  // namespace ds4::convert
