#pragma once
// Generator of a tiny checkpoint in the official DeepSeek V4 release layout (issue 22), made
// from the flash_geom fixture's f32 weights: the attention linears and shared experts become
// FP8 E4M3 with one E8M0 scale per 128x128 block ("<name>.scale"), the routed experts FP4 E2M1
// packed two per byte (low nibble = even element, dtype I8) with one E8M0 scale per 32 inputs;
// everything else keeps its dtype. It also writes the exact float decode of that checkpoint as
// a plain f32 checkpoint (same names, no scales): the reference the converter must reproduce.
// The E4M3/E2M1 value tables here are built from the format definitions (OCP MX spec), not
// shared with the converter. Scales: E8M0 e = 127 + ceil(log2(amax / max_code)), as the
// official quantizer's ue8m0 rounding; codes: nearest value, first code on ties.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fstream>

#include "convert/safetensors.h"

namespace ds4::test {

struct CkptTensor {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};
using Ckpt = std::map<std::string, CkptTensor>;

inline void write_ckpt(const std::string& path, const Ckpt& ts) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [n, t] : ts) {
    h[n] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  const std::string hs = h.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = hs.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << hs;
  for (const auto& [_, t] : ts) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// All 256 E4M3 codes (NaN codes 0x7F/0xFF left out of the search) and the 16 E2M1 codes.
inline std::vector<float> e4m3_values() {
  std::vector<float> v(256);
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
    if (e == 15 && m == 7) mag = NAN;
    v[c] = static_cast<float>(c & 0x80 ? -mag : mag);
  }
  return v;
}
inline std::vector<float> e2m1_values() {
  const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<float> v(16);
  for (int c = 0; c < 16; ++c) v[c] = static_cast<float>(c & 8 ? -mags[c & 7] : mags[c & 7]);
  return v;
}

inline int nearest_code(const std::vector<float>& table, float x) {
  int best = 0;
  double bd = INFINITY;
  for (int c = 0; c < static_cast<int>(table.size()); ++c) {
    if (std::isnan(table[c])) continue;
    const double d = std::fabs(static_cast<double>(table[c]) - x);
    if (d < bd) bd = d, best = c;
  }
  return best;
}

inline uint8_t e8m0_for(float amax, float max_code) {
  if (!(amax > 0)) return 0;
  const int e = 127 + static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / max_code)));
  return static_cast<uint8_t>(e < 0 ? 0 : e > 254 ? 254 : e);
}

inline float pow2(int e) { return static_cast<float>(std::ldexp(1.0, e)); }

inline std::vector<float> as_floats(const CkptTensor& t) {
  std::vector<float> f(t.bytes.size() / 4);
  std::memcpy(f.data(), t.bytes.data(), t.bytes.size());
  return f;
}
inline CkptTensor f32_tensor(const std::vector<uint64_t>& shape, const std::vector<float>& v) {
  CkptTensor t{"F32", shape, std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// FP8 weight [out, in] + scale; `ref` gets the decoded floats.
inline void to_fp8(const std::vector<float>& x, uint64_t out, uint64_t in, CkptTensor* w, CkptTensor* s, std::vector<float>* ref) {
  static const auto table = e4m3_values();
  const uint64_t bo = (out + 127) / 128, bi = (in + 127) / 128;
  *w = {"F8_E4M3", {out, in}, std::vector<uint8_t>(out * in)};
  *s = {"F8_E8M0", {bo, bi}, std::vector<uint8_t>(bo * bi)};
  ref->assign(out * in, 0.f);
  for (uint64_t br = 0; br < bo; ++br)
    for (uint64_t bc = 0; bc < bi; ++bc) {
      float amax = 0;
      for (uint64_t r = 128 * br; r < std::min(out, 128 * br + 128); ++r)
        for (uint64_t c = 128 * bc; c < std::min(in, 128 * bc + 128); ++c) amax = std::max(amax, std::fabs(x[r * in + c]));
      const uint8_t e = e8m0_for(amax, 448.f);
      s->bytes[br * bi + bc] = e;
      const float scale = pow2(e - 127);
      for (uint64_t r = 128 * br; r < std::min(out, 128 * br + 128); ++r)
        for (uint64_t c = 128 * bc; c < std::min(in, 128 * bc + 128); ++c) {
          const int code = nearest_code(table, x[r * in + c] / scale);
          w->bytes[r * in + c] = static_cast<uint8_t>(code);
          (*ref)[r * in + c] = table[code] * scale;
        }
    }
}

// FP4 weight [out, in/2] (I8) + scale [out, in/32].
inline void to_fp4(const std::vector<float>& x, uint64_t out, uint64_t in, CkptTensor* w, CkptTensor* s, std::vector<float>* ref) {
  static const auto table = e2m1_values();
  *w = {"I8", {out, in / 2}, std::vector<uint8_t>(out * in / 2, 0)};
  *s = {"F8_E8M0", {out, in / 32}, std::vector<uint8_t>(out * in / 32)};
  ref->assign(out * in, 0.f);
  for (uint64_t r = 0; r < out; ++r)
    for (uint64_t g = 0; g < in / 32; ++g) {
      float amax = 0;
      for (uint64_t c = 32 * g; c < 32 * g + 32; ++c) amax = std::max(amax, std::fabs(x[r * in + c]));
      const uint8_t e = e8m0_for(amax, 6.f);
      s->bytes[r * (in / 32) + g] = e;
      const float scale = pow2(e - 127);
      for (uint64_t c = 32 * g; c < 32 * g + 32; ++c) {
        const int code = nearest_code(table, x[r * in + c] / scale);
        w->bytes[(r * in + c) / 2] |= static_cast<uint8_t>(c % 2 ? code << 4 : code);
        (*ref)[r * in + c] = table[code] * scale;
      }
    }
}

inline bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// The release's own tensor name for a flash_geom (transformers save_pretrained) name: no
// "model." prefix, embed.weight, hc_head_{fn,base,scale}, attn.kv_norm (the names llama.cpp's
// converter and DeepSeek's inference code read).
inline std::string release_name(const std::string& n) {
  std::string s = n.rfind("model.", 0) == 0 ? n.substr(6) : n;
  if (s == "embed_tokens.weight") return "embed.weight";
  if (s.rfind("hc_head.hc_", 0) == 0) return "hc_head_" + s.substr(11);
  const std::string kv = ".attn.norm.weight";
  if (ends_with(s, kv)) return s.substr(0, s.size() - kv.size()) + ".attn.kv_norm.weight";
  return s;
}

// The release's config.json dialect (the legacy keys of the published Flash config:
// compress_ratios, num_hash_layers, rope_scaling) for a transformers-dialect config.
inline nlohmann::json release_config(const nlohmann::json& c) {
  nlohmann::json o = nlohmann::json::object();
  for (const char* k : {"architectures", "model_type", "vocab_size", "hidden_size", "moe_intermediate_size",
                        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_routed_experts",
                        "n_shared_experts", "num_experts_per_tok", "max_position_embeddings", "rms_norm_eps",
                        "q_lora_rank", "qk_rope_head_dim", "head_dim", "sliding_window", "compress_rope_theta",
                        "o_lora_rank", "o_groups", "index_n_heads", "index_head_dim", "index_topk", "hc_mult", "hc_eps",
                        "hc_sinkhorn_iters", "swiglu_limit", "routed_scaling_factor", "scoring_func", "norm_topk_prob",
                        "bos_token_id", "eos_token_id", "tie_word_embeddings"})
    o[k] = c.at(k);
  const auto& rp = c.at("rope_parameters");
  o["rope_theta"] = rp.at("main").at("rope_theta");
  const auto& y = rp.at("compress");
  o["rope_scaling"] = {{"type", "yarn"},
                       {"factor", y.at("factor")},
                       {"original_max_position_embeddings", y.at("original_max_position_embeddings")},
                       {"beta_fast", y.at("beta_fast")},
                       {"beta_slow", y.at("beta_slow")}};
  const auto& rates = c.at("compress_rates");
  nlohmann::json ratios = nlohmann::json::array();
  for (const auto& t : c.at("layer_types")) {
    const std::string ts = t.get<std::string>();
    ratios.push_back(ts == "sliding_attention" ? 0u
                     : ts == "compressed_sparse_attention" ? rates.at("compressed_sparse_attention").get<uint32_t>()
                                                           : rates.at("heavily_compressed_attention").get<uint32_t>());
  }
  o["compress_ratios"] = ratios;
  uint32_t hash = 0;
  for (const auto& t : c.at("mlp_layer_types")) hash += t.get<std::string>() == "hash_moe";
  o["num_hash_layers"] = hash;
  o["topk_method"] = "noaux_tc";
  return o;
}

// Reads flash_geom (f32), writes <official>/ and <reference>/ (config.json copied to both).
// Zeroes one FP4 group and one FP8 block first, so that all-zero blocks (E8M0 byte 0) occur.
// release_layout: tensor names and config.json as the published release spells them
// (release_name, release_config) instead of flash_geom's transformers spelling.
inline void make_official_checkpoint(const std::string& src_dir, const std::string& official_dir, const std::string& ref_dir,
                                     bool release_layout = false) {
  namespace fs = std::filesystem;
  auto src = ds4::convert::SafetensorsFile::open(src_dir + "/model.safetensors");
  auto rename = [release_layout](const std::string& n) { return release_layout ? release_name(n) : n; };
  Ckpt off, ref;
  for (const auto& t : src.tensors()) {
    CkptTensor raw{std::string(ds4::convert::st_dtype_name(t.dtype)), t.shape, std::vector<uint8_t>(t.bytes.begin(), t.bytes.end())};
    const std::string& n = t.name;
    const bool fp8 = t.shape.size() == 2 && t.dtype == ds4::convert::StDtype::F32 &&
                     (ends_with(n, "attn.wq_a.weight") || ends_with(n, "attn.wq_b.weight") || ends_with(n, "attn.wkv.weight") ||
                      ends_with(n, "attn.wo_a.weight") || ends_with(n, "attn.wo_b.weight") || ends_with(n, "indexer.wq_b.weight") ||
                      n.find("shared_experts.") != std::string::npos);
    const bool fp4 = t.shape.size() == 2 && t.dtype == ds4::convert::StDtype::F32 && n.find(".ffn.experts.") != std::string::npos;
    const std::string out_name = rename(n);
    if (!fp8 && !fp4) {
      off[out_name] = raw;
      ref[out_name] = raw;
      continue;
    }
    auto x = as_floats(raw);
    const uint64_t out = t.shape[0], in = t.shape[1];
    if (n == "model.layers.0.ffn.experts.1.w1.weight")
      for (uint64_t c = 32; c < 64; ++c) x[3 * in + c] = 0.f;  // one all-zero FP4 group
    if (n == "model.layers.2.attn.wo_b.weight") std::fill(x.begin(), x.end(), 0.f);  // an all-zero FP8 block
    const std::string base = out_name.substr(0, out_name.size() - std::string(".weight").size());
    CkptTensor w, s;
    std::vector<float> dec;
    if (fp8)
      to_fp8(x, out, in, &w, &s, &dec);
    else
      to_fp4(x, out, in, &w, &s, &dec);
    off[out_name] = w;
    off[base + ".scale"] = s;
    ref[out_name] = f32_tensor({out, in}, dec);
  }
  for (const auto& [dir, ts] : {std::pair{official_dir, &off}, std::pair{ref_dir, &ref}}) {
    if (dir.empty()) continue;
    fs::create_directories(dir);
    if (release_layout) {
      std::ifstream in(src_dir + "/config.json");
      std::ofstream(dir + "/config.json") << release_config(nlohmann::json::parse(in)).dump(2) << "\n";
    } else {
      fs::copy_file(src_dir + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
    }
    write_ckpt(dir + "/model.safetensors", *ts);
  }
}

}  // namespace ds4::test
