// config.json -> ModelShape. Both dialects are accepted (see hf_config.h); anything the GGUF
// layout cannot express (several KV heads, several shared experts, another router) is refused.
#include "convert/hf_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace ds4::convert {

using nlohmann::json;

ModelShape flash_shape(uint32_t layers) {
  ModelShape s;
  s.n_layers = layers;
  s.vocab = 129280;
  s.hidden = 4096;
  s.n_heads = 64;
  s.head_dim = 512;
  s.rope_dim = 64;
  s.q_lora_rank = 1024;
  s.o_groups = 8;
  s.o_lora_rank = 1024;
  s.sliding_window = 128;
  for (uint32_t il = 0; il < layers; ++il) s.compress_ratios.push_back(il < 2 ? 0 : (il % 2 == 0 ? 4 : 128));
  s.indexer_heads = 64;
  s.indexer_head_dim = 128;
  s.indexer_top_k = 512;
  s.n_experts = 256;
  s.n_experts_used = 6;
  s.expert_ffn = 2048;
  s.shared_ffn = 2048;
  s.n_hash_layers = std::min<uint32_t>(3, layers);
  s.yarn = {true, 16.0, 65536, 32.0, 1.0};
  s.context_length = 1048576;
  s.bos_id = 0;
  s.eos_id = 1;
  s.name = "DeepSeek-V4-Flash (synthetic)";
  return s;
}

namespace {

struct Reader {
  const json& j;
  const std::string& path;

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("{}: config field '{}': {}", path, field, what);
  }
  const json* get(const std::string& field) const {
    auto it = j.find(field);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  uint32_t u32(const std::string& field, std::optional<uint32_t> def = std::nullopt) const {
    const json* v = get(field);
    if (!v) {
      if (def) return *def;
      bad(field, "missing");
    }
    if (!v->is_number_integer()) bad(field, "not an integer");
    int64_t x = v->get<int64_t>();
    if (x < 0 || x > std::numeric_limits<uint32_t>::max()) bad(field, fmt::format("value {} out of range", x));
    return static_cast<uint32_t>(x);
  }
  double num(const std::string& field, std::optional<double> def = std::nullopt) const {
    const json* v = get(field);
    if (!v) {
      if (def) return *def;
      bad(field, "missing");
    }
    if (!v->is_number()) bad(field, "not a number");
    double x = v->get<double>();
    if (!std::isfinite(x)) bad(field, "not finite");
    return x;
  }
};

YarnParams parse_yarn(const json& r, const std::string& path, const std::string& field, uint64_t max_pos) {
  YarnParams y;
  std::string type;
  if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
  else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
  if (type.empty() || type == "default") return y;
  if (type != "yarn") fail("{}: config field '{}': rope type '{}' is not supported (only yarn)", path, field, type);
  Reader rd{r, path};
  y.enabled = true;
  y.factor = rd.num("factor");
  if (!(y.factor >= 1.0)) fail("{}: config field '{}.factor' is {}, must be >= 1", path, field, y.factor);
  y.original_context = rd.u32("original_max_position_embeddings", static_cast<uint32_t>(std::min<uint64_t>(max_pos, UINT32_MAX)));
  y.beta_fast = rd.num("beta_fast", 32.0);
  y.beta_slow = rd.num("beta_slow", 1.0);
  if (r.contains("attention_factor") && r["attention_factor"].is_number() && r["attention_factor"].get<double>() != 1.0)
    fail("{}: config field '{}.attention_factor' is {}; DeepSeek V4 uses no YaRN magnitude scaling", path, field,
         r["attention_factor"].get<double>());
  return y;
}

}  // namespace

ModelShape parse_hf_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail("{}: config is not a JSON object", path);
  Reader r{j, path};
  if (auto mt = r.get("model_type"); mt && (!mt->is_string() || mt->get<std::string>() != "deepseek_v4"))
    r.bad("model_type", fmt::format("is {}, expected \"deepseek_v4\"", mt->dump()));

  ModelShape s;
  s.n_layers = r.u32("num_hidden_layers");
  s.vocab = r.u32("vocab_size");
  s.hidden = r.u32("hidden_size");
  s.n_heads = r.u32("num_attention_heads");
  s.head_dim = r.u32("head_dim");
  s.q_lora_rank = r.u32("q_lora_rank");
  s.o_groups = r.u32("o_groups");
  s.o_lora_rank = r.u32("o_lora_rank");
  s.sliding_window = r.u32("sliding_window");
  s.indexer_heads = r.u32("index_n_heads");
  s.indexer_head_dim = r.u32("index_head_dim");
  s.indexer_top_k = r.u32("index_topk");
  s.n_experts = r.u32("n_routed_experts");
  s.n_experts_used = r.u32("num_experts_per_tok");
  s.expert_ffn = r.u32("moe_intermediate_size");
  s.shared_ffn = s.expert_ffn;  // transformers' shared MLP reads intermediate_size = moe_intermediate_size
  s.hc_mult = r.u32("hc_mult", 4);
  s.hc_sinkhorn_iters = r.u32("hc_sinkhorn_iters", 20);
  s.hc_eps = r.num("hc_eps", 1e-6);
  s.rms_eps = r.num("rms_norm_eps", 1e-6);
  s.rope_base = r.num("rope_theta", 10000.0);
  s.compress_rope_base = r.num("compress_rope_theta", 160000.0);
  s.expert_weights_scale = r.num("routed_scaling_factor", 1.5);
  s.swiglu_limit = r.num("swiglu_limit", 10.0);
  s.context_length = r.u32("max_position_embeddings", 1048576);
  if (auto v = r.get("norm_topk_prob")) {
    if (!v->is_boolean()) r.bad("norm_topk_prob", "not a boolean");
    s.expert_weights_norm = v->get<bool>();
  }
  for (const char* f : {"num_hidden_layers", "vocab_size", "hidden_size", "num_attention_heads", "head_dim",
                        "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
                        "moe_intermediate_size", "hc_mult"})
    if (r.u32(f) == 0) r.bad(f, "must be positive");

  if (r.u32("num_key_value_heads", 1) != 1) r.bad("num_key_value_heads", "DeepSeek V4 has one shared KV head");
  if (r.u32("n_shared_experts", 1) != 1) r.bad("n_shared_experts", "the GGUF layout holds exactly one shared expert");
  if (auto v = r.get("scoring_func"); v && (!v->is_string() || v->get<std::string>() != "sqrtsoftplus"))
    r.bad("scoring_func", fmt::format("is {}, only \"sqrtsoftplus\" is supported", v->dump()));
  if (auto v = r.get("tie_word_embeddings"); v && v->is_boolean() && v->get<bool>())
    r.bad("tie_word_embeddings", "tied embeddings are not supported");
  if (s.n_experts_used > s.n_experts) r.bad("num_experts_per_tok", "larger than n_routed_experts");
  if (s.n_heads * s.head_dim % s.o_groups != 0) r.bad("o_groups", "does not divide heads x head_dim");

  // RoPE dims: legacy qk_rope_head_dim, else partial_rotary_factor (top level or in rope_parameters).
  double partial = 0.125;
  if (auto v = r.get("qk_rope_head_dim")) {
    s.rope_dim = r.u32("qk_rope_head_dim");
    (void)v;
  } else {
    partial = r.num("partial_rotary_factor", 0.125);
    double d = partial * s.head_dim;
    if (std::fabs(d - std::round(d)) > 1e-9) r.bad("partial_rotary_factor", "does not give a whole number of dims");
    s.rope_dim = static_cast<uint32_t>(std::lround(d));
  }
  if (s.rope_dim == 0 || s.rope_dim % 2 != 0 || s.rope_dim > s.head_dim)
    r.bad("qk_rope_head_dim", fmt::format("RoPE dims {} must be even and in (0, head_dim]", s.rope_dim));

  // Per-layer compression ratios.
  if (auto v = r.get("compress_ratios")) {
    if (!v->is_array()) r.bad("compress_ratios", "not an array");
    if (v->size() < s.n_layers)
      r.bad("compress_ratios", fmt::format("{} entries for {} layers", v->size(), s.n_layers));
    for (uint32_t il = 0; il < s.n_layers; ++il) {
      const auto& e = (*v)[il];
      if (!e.is_number_unsigned()) r.bad(fmt::format("compress_ratios[{}]", il), "not a non-negative integer");
      s.compress_ratios.push_back(e.get<uint32_t>());
    }
  } else if (auto lt = r.get("layer_types")) {
    uint32_t csa = 4, hca = 128;
    if (auto cr = r.get("compress_rates")) {
      if (!cr->is_object()) r.bad("compress_rates", "not an object");
      Reader cr_r{*cr, path};
      csa = cr_r.u32("compressed_sparse_attention", 4);
      hca = cr_r.u32("heavily_compressed_attention", 128);
    }
    csa = r.u32("compress_rate_csa", csa);
    hca = r.u32("compress_rate_hca", hca);
    if (!lt->is_array() || lt->size() < s.n_layers) r.bad("layer_types", "not an array with one entry per layer");
    for (uint32_t il = 0; il < s.n_layers; ++il) {
      const auto& e = (*lt)[il];
      std::string t = e.is_string() ? e.get<std::string>() : "";
      if (t == "sliding_attention") s.compress_ratios.push_back(0);
      else if (t == "compressed_sparse_attention") s.compress_ratios.push_back(csa);
      else if (t == "heavily_compressed_attention") s.compress_ratios.push_back(hca);
      else r.bad(fmt::format("layer_types[{}]", il), fmt::format("unknown layer type {}", e.dump()));
    }
  } else {
    // transformers would silently build the V4-Pro schedule here; a converter must not guess.
    fail("{}: config has neither 'compress_ratios' nor 'layer_types'; refusing to guess the layer schedule", path);
  }
  for (uint32_t il = 0; il < s.n_layers; ++il) {
    uint32_t c = s.compress_ratios[il];
    if (c == 1) r.bad(fmt::format("compress ratio of layer {}", il), "1 is not a compression");
  }
  bool any_csa = false;
  for (uint32_t c : s.compress_ratios) any_csa |= (c == 4);
  if (any_csa && (s.indexer_heads == 0 || s.indexer_head_dim == 0 || s.indexer_top_k == 0))
    r.bad("index_n_heads", "ratio-4 layers need a positive indexer head count, head dim and top-k");
  if (any_csa && (s.indexer_head_dim < s.rope_dim || s.indexer_head_dim % 2))
    r.bad("index_head_dim", "must be even and hold the RoPE dims");

  // Hash-routed layers: a prefix of the stack.
  if (auto m = r.get("mlp_layer_types")) {
    if (!m->is_array() || m->size() < s.n_layers) r.bad("mlp_layer_types", "not an array with one entry per layer");
    uint32_t n_hash = 0;
    bool seen_moe = false;
    for (uint32_t il = 0; il < s.n_layers; ++il) {
      std::string t = (*m)[il].is_string() ? (*m)[il].get<std::string>() : "";
      if (t == "hash_moe") {
        if (seen_moe) r.bad("mlp_layer_types", "hash_moe layers must come first (GGUF stores only their count)");
        ++n_hash;
      } else if (t == "moe") {
        seen_moe = true;
      } else {
        r.bad(fmt::format("mlp_layer_types[{}]", il), fmt::format("unknown type {}", (*m)[il].dump()));
      }
    }
    s.n_hash_layers = n_hash;
  } else {
    s.n_hash_layers = std::min(s.n_layers, r.u32("num_hash_layers", 3));  // transformers' default
  }

  // YaRN for compressed layers: legacy rope_scaling, or rope_parameters (nested or flat).
  const uint64_t max_pos = s.context_length;
  if (auto rs = r.get("rope_scaling")) {
    if (!rs->is_object()) r.bad("rope_scaling", "not an object");
    s.yarn = parse_yarn(*rs, path, "rope_scaling", max_pos);
  } else if (auto rp = r.get("rope_parameters")) {
    if (!rp->is_object()) r.bad("rope_parameters", "not an object");
    if (rp->contains("compress") && (*rp)["compress"].is_object()) {
      const json& c = (*rp)["compress"];
      s.yarn = parse_yarn(c, path, "rope_parameters.compress", max_pos);
      if (c.contains("rope_theta")) s.compress_rope_base = Reader{c, path}.num("rope_theta");
      if (rp->contains("main") && (*rp)["main"].is_object() && (*rp)["main"].contains("rope_theta"))
        s.rope_base = Reader{(*rp)["main"], path}.num("rope_theta");
      for (const char* part : {"main", "compress"}) {
        if (!rp->contains(part) || !(*rp)[part].contains("partial_rotary_factor")) continue;
        double pf = Reader{(*rp)[part], path}.num("partial_rotary_factor");
        if (std::fabs(pf * s.head_dim - s.rope_dim) > 1e-6)
          r.bad(fmt::format("rope_parameters.{}.partial_rotary_factor", part),
                fmt::format("{} gives {} RoPE dims, but the model uses {}", pf, pf * s.head_dim, s.rope_dim));
      }
    } else {
      s.yarn = parse_yarn(*rp, path, "rope_parameters", max_pos);
    }
  }
  if (!s.yarn.enabled) s.yarn = YarnParams{false, 1.0, max_pos, 32.0, 1.0};

  if (auto v = r.get("bos_token_id"); v && v->is_number_unsigned()) s.bos_id = v->get<uint32_t>();
  if (auto v = r.get("eos_token_id"); v && v->is_number_unsigned()) s.eos_id = v->get<uint32_t>();
  if (auto v = r.get("_name_or_path"); v && v->is_string() && !v->get<std::string>().empty())
    s.name = v->get<std::string>();
  return s;
}

ModelShape read_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  return parse_hf_config(j, path);
}

}  // namespace ds4::convert
