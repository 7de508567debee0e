// convert-hf for qwen3_5_moe: binds every GGUF tensor of the qwen35moe table to its source,
// checks every shape and that every source tensor is used, then writes tensor by tensor
// (routed experts one expert at a time).
#include "convert/qwen35moe_convert.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "convert/metadata.h"
#include "ds4/tokenizer.h"
#include "convert/row_encode.h"
#include "convert/safetensors.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct QShape {
  std::string name;
  uint32_t vocab = 0, hidden = 0, n_layers = 0, n_heads = 0, n_kv = 0, head_dim = 0;
  uint32_t conv_kernel = 0, dk = 0, dv = 0, n_k = 0, n_v = 0;
  uint32_t n_experts = 0, n_used = 0, expert_ff = 0, shared_ff = 0;
  uint64_t context = 0;
  double rms_eps = 1e-6, rope_theta = 10000.0, partial_rotary = 0.25;
  std::vector<int32_t> mrope_section;
  std::vector<bool> recurrent;
  uint32_t full_interval = 4;
  bool tie = false;
  std::optional<int64_t> bos, eos;
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

// The text config: top level for Qwen3_5MoeForCausalLM, `text_config` for the multimodal one.
const json& text_config(const json& j) {
  if (j.contains("text_config") && j["text_config"].is_object()) return j["text_config"];
  return j;
}

QShape read_shape(const std::string& path) {
  const json root = read_json(path);
  const json& c = text_config(root);
  QShape s;
  auto u32 = [&](const char* k, std::optional<uint32_t> def = std::nullopt) -> uint32_t {
    if (!c.contains(k) || c[k].is_null()) {
      if (def) return *def;
      fail("{}: missing '{}'", path, k);
    }
    if (!c[k].is_number_integer() || c[k].get<int64_t>() < 0 || c[k].get<int64_t>() > UINT32_MAX)
      fail("{}: '{}' is not a non-negative integer", path, k);
    return c[k].get<uint32_t>();
  };
  s.vocab = u32("vocab_size");
  s.hidden = u32("hidden_size");
  s.n_layers = u32("num_hidden_layers");
  s.n_heads = u32("num_attention_heads");
  s.n_kv = u32("num_key_value_heads");
  s.head_dim = u32("head_dim", s.n_heads ? s.hidden / s.n_heads : 0);
  s.conv_kernel = u32("linear_conv_kernel_dim");
  s.dk = u32("linear_key_head_dim");
  s.dv = u32("linear_value_head_dim");
  s.n_k = u32("linear_num_key_heads");
  s.n_v = u32("linear_num_value_heads");
  s.n_experts = u32("num_experts");
  s.n_used = u32("num_experts_per_tok");
  s.expert_ff = u32("moe_intermediate_size");
  s.shared_ff = u32("shared_expert_intermediate_size", 0);
  s.context = u32("max_position_embeddings", 0);
  s.full_interval = u32("full_attention_interval", 4);
  if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number()) s.rms_eps = c["rms_norm_eps"].get<double>();
  const json* rp = c.contains("rope_parameters") && c["rope_parameters"].is_object() ? &c["rope_parameters"] : nullptr;
  auto num = [&](const char* k, double def) {
    if (rp && rp->contains(k) && (*rp)[k].is_number()) return (*rp)[k].get<double>();
    if (c.contains(k) && c[k].is_number()) return c[k].get<double>();
    return def;
  };
  s.rope_theta = num("rope_theta", 10000.0);
  s.partial_rotary = num("partial_rotary_factor", 0.25);
  if (rp && rp->contains("rope_type") && (*rp)["rope_type"].is_string() && (*rp)["rope_type"] != "default")
    fail("{}: rope_type '{}' is not supported (only default)", path, (*rp)["rope_type"].get<std::string>());
  const json* ms = rp && rp->contains("mrope_section") ? &(*rp)["mrope_section"] : nullptr;
  if (ms && ms->is_array())
    for (const auto& v : *ms) s.mrope_section.push_back(v.get<int32_t>());
  else
    s.mrope_section = {11, 11, 10};  // transformers' default (what llama.cpp's converter writes)
  while (s.mrope_section.size() < 4) s.mrope_section.push_back(0);
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    if (c["layer_types"].size() != s.n_layers)
      fail("{}: layer_types has {} entries for {} layers", path, c["layer_types"].size(), s.n_layers);
    for (const auto& t : c["layer_types"]) {
      const std::string v = t.is_string() ? t.get<std::string>() : "";
      if (v != "linear_attention" && v != "full_attention") fail("{}: unknown layer type '{}'", path, v);
      s.recurrent.push_back(v == "linear_attention");
    }
  } else {
    for (uint32_t i = 0; i < s.n_layers; ++i) s.recurrent.push_back((i + 1) % s.full_interval != 0);
  }
  s.tie = root.value("tie_word_embeddings", c.value("tie_word_embeddings", false));
  for (const json* j : {&c, &root}) {
    if (!s.bos && j->contains("bos_token_id") && (*j)["bos_token_id"].is_number_integer()) s.bos = (*j)["bos_token_id"].get<int64_t>();
    if (!s.eos && j->contains("eos_token_id") && (*j)["eos_token_id"].is_number_integer()) s.eos = (*j)["eos_token_id"].get<int64_t>();
  }
  if (s.n_v % std::max<uint32_t>(1, s.n_k) != 0 || s.n_k == 0)
    fail("{}: {} linear value heads do not group over {} key heads", path, s.n_v, s.n_k);
  if (s.n_kv == 0 || s.n_heads % s.n_kv != 0) fail("{}: {} heads over {} KV heads", path, s.n_heads, s.n_kv);
  for (uint32_t v : {s.vocab, s.hidden, s.n_layers, s.head_dim, s.conv_kernel, s.dk, s.dv, s.n_experts, s.n_used, s.expert_ff})
    if (v == 0) fail("{}: a required dimension is zero", path);
  return s;
}

// What one GGUF tensor is made from.
enum class Fix { None, PlusOne, NegExp, ReorderRows, ReorderCols, QkvRows, ConvChannels, ReorderVec, ReorderVecNegExp };

struct Plan {
  std::string gguf;
  std::vector<uint64_t> ne;   // ggml order
  GgmlType type = GgmlType::F32;
  std::string hf;             // source name (without prefix handling)
  Fix fix = Fix::None;
  int expert_part = -1;       // stacked experts: -1 whole, 0 gate rows, 1 up rows, 2 down
  bool per_expert = false;    // from mlp.experts.E.<w>.weight
  std::string per_expert_w;   // gate_proj / up_proj / down_proj
};

std::string shape_str(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Grouped (by key head) -> tiled value-head order along an axis of n_k * R blocks of `block`.
std::vector<uint64_t> tiled_index(uint32_t n_k, uint32_t R, uint64_t block) {
  std::vector<uint64_t> src(static_cast<size_t>(n_k) * R * block);
  for (uint32_t r = 0; r < R; ++r)
    for (uint32_t k = 0; k < n_k; ++k)
      for (uint64_t i = 0; i < block; ++i)
        src[(static_cast<uint64_t>(r) * n_k + k) * block + i] = (static_cast<uint64_t>(k) * R + r) * block + i;
  return src;
}

// What a tensor is, for its type under each recipe.
enum class Role { Embd, Output, Matrix, Expert, Small, Vector };

// f32: everything F32. f16: matrices F16. q8_0: matrices Q8_0. flash-q4 (the qwen36-q4 synth
// preset): Q4_K matrices and experts, Q6_K output, as the published Q4_K_S files. Routers,
// DeltaNet alpha/beta projections, the shared-expert gate, norms and small vectors stay F32.
GgmlType tensor_type(Recipe r, Role role, uint64_t n_in) {
  if (role == Role::Vector || role == Role::Small) return GgmlType::F32;
  switch (r) {
    case Recipe::F32: return GgmlType::F32;
    case Recipe::F16: return GgmlType::F16;
    case Recipe::Q8_0: return n_in % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
    case Recipe::FlashQ4:
      if (n_in % 256 != 0) return n_in % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
      return role == Role::Output ? GgmlType::Q6_K : GgmlType::Q4_K;
    default:
      fail("recipe {} is not available for qwen35moe (f32, f16, q8_0, flash-q4 = Q4_K/Q6_K)", recipe_name(r));
  }
}

// The qwen35moe GGUF table (llama.cpp's names and ggml shapes) with each tensor's HF source.
// stacked(il): layer il's routed experts come as transformers' stacked tensors (else one
// tensor per expert). lm_head: the checkpoint has its own output matrix (else tied).
std::vector<Plan> build_plan(const QShape& s, Recipe recipe, const std::function<bool(uint32_t)>& stacked,
                             bool lm_head) {
  const uint64_t H = s.hidden, hd = s.head_dim, kd = uint64_t{s.dk} * s.n_k, vd = uint64_t{s.dv} * s.n_v;
  const uint64_t cch = 2 * kd + vd, E = s.n_experts, I = s.expert_ff;
  std::vector<Plan> plan;
  auto add = [&](std::string g, std::vector<uint64_t> ne, Role role, std::string hf, Fix fix, int part) {
    Plan p;
    p.type = tensor_type(recipe, role, ne[0]);
    p.gguf = std::move(g), p.ne = std::move(ne), p.hf = std::move(hf), p.fix = fix;
    p.expert_part = part;
    plan.push_back(std::move(p));
  };
  auto mat = [&](std::string g, std::vector<uint64_t> ne, std::string hf, Fix fix = Fix::None, Role role = Role::Matrix) {
    add(std::move(g), std::move(ne), role, std::move(hf), fix, -1);
  };
  auto vec = [&](std::string g, std::vector<uint64_t> ne, std::string hf, Fix fix = Fix::None) {
    add(std::move(g), std::move(ne), Role::Vector, std::move(hf), fix, -1);
  };
  mat("token_embd.weight", {H, s.vocab}, "embed_tokens.weight", Fix::None, Role::Embd);
  vec("output_norm.weight", {H}, "norm.weight", Fix::PlusOne);
  if (lm_head) mat("output.weight", {H, s.vocab}, "lm_head.weight", Fix::None, Role::Output);
  for (uint32_t il = 0; il < s.n_layers; ++il) {
    auto g = [il](const char* x) { return fmt::format("blk.{}.{}", il, x); };
    auto h = [il](const char* x) { return fmt::format("layers.{}.{}", il, x); };
    vec(g("attn_norm.weight"), {H}, h("input_layernorm.weight"), Fix::PlusOne);
    vec(g("post_attention_norm.weight"), {H}, h("post_attention_layernorm.weight"), Fix::PlusOne);
    if (s.recurrent[il]) {
      mat(g("attn_qkv.weight"), {H, cch}, h("linear_attn.in_proj_qkv.weight"), Fix::QkvRows);
      mat(g("attn_gate.weight"), {H, vd}, h("linear_attn.in_proj_z.weight"), Fix::ReorderRows);
      mat(g("ssm_beta.weight"), {H, s.n_v}, h("linear_attn.in_proj_b.weight"), Fix::ReorderRows, Role::Small);
      mat(g("ssm_alpha.weight"), {H, s.n_v}, h("linear_attn.in_proj_a.weight"), Fix::ReorderRows, Role::Small);
      vec(g("ssm_conv1d.weight"), {s.conv_kernel, cch}, h("linear_attn.conv1d.weight"), Fix::ConvChannels);
      vec(g("ssm_dt.bias"), {s.n_v}, h("linear_attn.dt_bias"), Fix::ReorderVec);
      vec(g("ssm_a"), {s.n_v}, h("linear_attn.A_log"), Fix::ReorderVecNegExp);
      vec(g("ssm_norm.weight"), {s.dv}, h("linear_attn.norm.weight"));
      mat(g("ssm_out.weight"), {vd, H}, h("linear_attn.out_proj.weight"), Fix::ReorderCols);
    } else {
      mat(g("attn_q.weight"), {H, s.n_heads * hd * 2}, h("self_attn.q_proj.weight"));
      mat(g("attn_k.weight"), {H, s.n_kv * hd}, h("self_attn.k_proj.weight"));
      mat(g("attn_v.weight"), {H, s.n_kv * hd}, h("self_attn.v_proj.weight"));
      mat(g("attn_output.weight"), {s.n_heads * hd, H}, h("self_attn.o_proj.weight"));
      vec(g("attn_q_norm.weight"), {hd}, h("self_attn.q_norm.weight"), Fix::PlusOne);
      vec(g("attn_k_norm.weight"), {hd}, h("self_attn.k_norm.weight"), Fix::PlusOne);
    }
    mat(g("ffn_gate_inp.weight"), {H, E}, h("mlp.gate.weight"), Fix::None, Role::Small);
    const bool st = stacked(il);
    const char* wn[3] = {"gate_proj", "up_proj", "down_proj"};
    const char* gn[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
    for (int part = 0; part < 3; ++part) {
      std::vector<uint64_t> ne = part < 2 ? std::vector<uint64_t>{H, I, E} : std::vector<uint64_t>{I, H, E};
      add(g(gn[part]), ne, Role::Expert,
          st ? h(part < 2 ? "mlp.experts.gate_up_proj" : "mlp.experts.down_proj") : h("mlp.experts"), Fix::None, part);
      if (!st) {
        plan.back().per_expert = true;
        plan.back().per_expert_w = wn[part];
      }
    }
    if (s.shared_ff) {
      vec(g("ffn_gate_inp_shexp.weight"), {H}, h("mlp.shared_expert_gate.weight"));
      mat(g("ffn_gate_shexp.weight"), {H, s.shared_ff}, h("mlp.shared_expert.gate_proj.weight"));
      mat(g("ffn_up_shexp.weight"), {H, s.shared_ff}, h("mlp.shared_expert.up_proj.weight"));
      mat(g("ffn_down_shexp.weight"), {s.shared_ff, H}, h("mlp.shared_expert.down_proj.weight"));
    }
  }
  return plan;
}

void add_metadata(gguf::Writer& w, const QShape& s) {
  using gguf::Value;
  using gguf::ValueType;
  const std::string a = "qwen35moe.";
  auto u32 = [&](const char* k, uint64_t v) { w.add_kv(a + k, Value::u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const char* k, double v) { w.add_kv(a + k, Value::f32(static_cast<float>(v))); };
  w.add_kv("general.architecture", Value::string("qwen35moe"));
  w.add_kv("general.name", Value::string(s.name.empty() ? "qwen35moe" : s.name));
  u32("block_count", s.n_layers);
  u32("context_length", s.context);
  u32("embedding_length", s.hidden);
  u32("attention.head_count", s.n_heads);
  u32("attention.head_count_kv", s.n_kv);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  f32("attention.layer_norm_rms_epsilon", s.rms_eps);
  f32("rope.freq_base", s.rope_theta);
  u32("rope.dimension_count", static_cast<uint64_t>(s.head_dim * s.partial_rotary));
  std::vector<Value> sec;
  for (int32_t v : s.mrope_section) sec.push_back(Value::i32(v));
  w.add_kv(a + "rope.dimension_sections", Value::array(ValueType::I32, std::move(sec)));
  u32("expert_count", s.n_experts);
  u32("expert_used_count", s.n_used);
  u32("expert_feed_forward_length", s.expert_ff);
  if (s.shared_ff) u32("expert_shared_feed_forward_length", s.shared_ff);
  u32("ssm.conv_kernel", s.conv_kernel);
  u32("ssm.state_size", s.dk);
  u32("ssm.group_count", s.n_k);
  u32("ssm.time_step_rank", s.n_v);
  u32("ssm.inner_size", static_cast<uint64_t>(s.dv) * s.n_v);
  std::vector<Value> rec;
  for (bool b : s.recurrent) rec.push_back(Value::boolean(b));
  w.add_kv(a + "attention.recurrent_layers", Value::array(ValueType::BOOL, std::move(rec)));
  u32("full_attention_interval", s.full_interval);
}

}  // namespace

bool is_qwen35moe_config(const std::string& config_path) {
  if (!fs::exists(config_path)) return false;
  const json root = read_json(config_path);
  const std::string mt = root.value("model_type", "");
  if (mt == "qwen3_5_moe" || mt == "qwen3_5_moe_text") return true;
  if (root.contains("architectures") && root["architectures"].is_array())
    for (const auto& a : root["architectures"])
      if (a.is_string() && a.get<std::string>().rfind("Qwen3_5Moe", 0) == 0) return true;
  return false;
}

ConvertReport convert_qwen35moe(const ConvertOptions& o) {
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  const fs::path dir(o.hf_dir);
  if (!fs::is_directory(dir)) fail("{}: not a directory", o.hf_dir);
  QShape s = read_shape((dir / "config.json").string());
  s.name = dir.filename().string();
  if (s.dk != s.dv)
    fail("{}: linear key head dim {} != value head dim {}; llama.cpp's qwen35moe needs them equal", o.hf_dir, s.dk, s.dv);
  ConvertReport rep;

  // Source tensors by their name without the model prefix.
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(e.path().string())));
  if (files.empty()) fail("{}: no .safetensors files", o.hf_dir);
  std::map<std::string, const StTensor*> src;
  for (const auto& f : files)
    for (const auto& t : f->tensors()) {
      std::string n = t.name;
      for (const char* p : {"model.language_model.", "model."})
        if (n.rfind(p, 0) == 0) {
          n = n.substr(std::string(p).size());
          break;
        }
      if (n.rfind("visual.", 0) == 0 || n.rfind("mtp.", 0) == 0) {
        rep.notes.push_back(fmt::format("ignored {} (vision tower / MTP: not part of the text model)", t.name));
        continue;
      }
      if (!src.emplace(n, &t).second) fail("{}: tensor '{}' appears twice", o.hf_dir, t.name);
    }

  const uint64_t H = s.hidden, kd = uint64_t{s.dk} * s.n_k, vd = uint64_t{s.dv} * s.n_v;
  const uint64_t cch = 2 * kd + vd, E = s.n_experts, I = s.expert_ff;
  std::vector<Plan> plan = build_plan(
      s, o.recipe,
      [&](uint32_t il) {
        const std::string p = fmt::format("layers.{}.mlp.experts.", il);
        return src.count(p + "gate_up_proj") || src.count(p + "down_proj");
      },
      !s.tie || src.count("lm_head.weight"));
  // Bind and check every source; every source must be used.
  std::set<std::string> used;
  auto need = [&](const std::string& name, const std::vector<uint64_t>& torch_shape, const Plan& p) -> const StTensor* {
    auto it = src.find(name);
    if (it == src.end()) fail("{}: no tensor '{}' for GGUF {} {}", o.hf_dir, name, p.gguf, shape_str(p.ne));
    if (it->second->shape != torch_shape)
      fail("{}: tensor '{}' has shape {}, expected {} for GGUF {}", it->second->file, it->second->name,
           shape_str(it->second->shape), shape_str(torch_shape), p.gguf);
    used.insert(name);
    return it->second;
  };
  auto torch_of = [](const std::vector<uint64_t>& ne) { return std::vector<uint64_t>(ne.rbegin(), ne.rend()); };
  for (const auto& p : plan) {
    if (p.expert_part >= 0) {
      if (!p.per_expert) {
        if (p.expert_part < 2) need(p.hf, {E, 2 * I, H}, p);
        else need(p.hf, {E, H, I}, p);
      } else {
        for (uint64_t e = 0; e < E; ++e)
          need(fmt::format("{}.{}.{}.weight", p.hf, e, p.per_expert_w), {p.ne[1], p.ne[0]}, p);
      }
    } else if (p.fix == Fix::ConvChannels) {
      need(p.hf, {cch, 1, s.conv_kernel}, p);
    } else if (p.gguf.find("ffn_gate_inp_shexp") != std::string::npos) {
      need(p.hf, {1, H}, p);
    } else {
      need(p.hf, torch_of(p.ne), p);
    }
  }
  for (const auto& [n, t] : src)
    if (!used.count(n)) fail("{}: tensor '{}' does not belong in this model (config.json lays out no such tensor)", o.hf_dir, t->name);

  tokenizer::Vocab vocab;
  const fs::path tok_json = dir / "tokenizer.json";
  if (fs::exists(tok_json)) {
    vocab = vocab_from_tokenizer_json(tok_json.string(), s.vocab);
    rep.vocab_from_tokenizer_json = true;
  } else {
    // Placeholder: the 256 byte tokens, then (where vocab_size leaves room) the ChatML control
    // tokens, so a random test model can still be driven through the chat front ends.
    vocab = byte_vocab(s.vocab);
    vocab.pre = tokenizer::PreTokenizerKind::Qwen35;
    vocab.nfc = true;
    const char* chatml[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                            "<tool_response>", "</tool_response>", "<think>", "</think>"};
    size_t n_added = 0;
    for (const char* t : chatml) {
      const size_t id = 256 + n_added;
      if (id >= vocab.tokens.size()) break;
      vocab.tokens[id] = t;
      const bool special = n_added < 3;  // as Qwen's tokenizer.json: <|...|> special, the tags not
      vocab.types[id] = special ? tokenizer::TokenType::Control : tokenizer::TokenType::UserDefined;
      vocab.added.push_back({static_cast<int32_t>(id), static_cast<uint8_t>(special ? tokenizer::kSpecial : 0)});
      ++n_added;
    }
    rep.notes.push_back(fmt::format("no tokenizer.json: wrote a byte-level placeholder vocabulary{}",
                                    n_added ? fmt::format(" with {} ChatML control tokens", n_added) : ""));
    if (n_added >= 3) vocab.eos = 256 + 2;  // <|im_end|>
  }
  if (s.eos && *s.eos >= 0 && *s.eos < s.vocab && !vocab.eos) vocab.eos = static_cast<int32_t>(*s.eos);
  vocab.validate("vocabulary for GGUF");
  (void)Tokenizer::from_vocab(vocab, "vocabulary for GGUF");
  std::optional<std::string> chat_template;
  if (fs::exists(dir / "tokenizer_config.json")) {
    const json tc = read_json((dir / "tokenizer_config.json").string());
    if (tc.contains("chat_template") && tc["chat_template"].is_string()) chat_template = tc["chat_template"].get<std::string>();
  }
  if (fs::exists(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    chat_template = ss.str();
  }

  gguf::Writer w(o.out_path);
  add_metadata(w, s);
  tokenizer::vocab_to_gguf(vocab, w);
  if (chat_template) w.add_kv("tokenizer.chat_template", gguf::Value::string(*chat_template));
  for (const auto& p : plan) w.add_tensor(p.gguf, p.type, p.ne);
  w.write_header();

  const uint32_t R = s.n_v / s.n_k;
  std::vector<float> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    const uint64_t ne0 = p.ne[0];
    auto emit = [&](const std::vector<float>& rows, uint64_t nrows, const std::string& what) {
      auto bytes = encode_rows(p.type, rows.data(), static_cast<int64_t>(nrows), static_cast<int64_t>(ne0), what.c_str(),
                               o.threads);
      w.write_tensor_data(bytes);
      rep.data_bytes += bytes.size();
    };
    if (p.expert_part >= 0) {
      const uint64_t rows = p.ne[1];
      for (uint64_t e = 0; e < E; ++e) {
        buf.resize(rows * ne0);
        if (p.per_expert) {
          to_f32(*src.at(fmt::format("{}.{}.{}.weight", p.hf, e, p.per_expert_w)), 0, rows * ne0, buf.data());
        } else {
          const StTensor& t = *src.at(p.hf);
          const uint64_t slab_rows = p.expert_part < 2 ? 2 * I : H;
          const uint64_t first = e * slab_rows + (p.expert_part == 1 ? I : 0);
          to_f32(t, first * ne0, rows * ne0, buf.data());
        }
        emit(buf, rows, fmt::format("{} expert {}", p.gguf, e));
      }
      log(fmt::format("[{}/{}] {} {} {}", i + 1, plan.size(), p.gguf, traits(p.type).name, shape_str(p.ne)));
      continue;
    }
    const StTensor& t = *src.at(p.hf);
    std::vector<float> x = to_f32(t);
    uint64_t nrows = x.size() / ne0;
    std::vector<float> y = x;
    switch (p.fix) {
      case Fix::None: break;
      case Fix::PlusOne:
        for (float& v : y) v += 1.0f;
        break;
      case Fix::NegExp:
        for (float& v : y) v = -std::exp(v);
        break;
      case Fix::ReorderVec:
      case Fix::ReorderVecNegExp: {
        const auto idx = tiled_index(s.n_k, R, 1);
        for (size_t j = 0; j < idx.size(); ++j) y[j] = x[idx[j]];
        if (p.fix == Fix::ReorderVecNegExp)
          for (float& v : y) v = -std::exp(v);
        break;
      }
      case Fix::ReorderRows: {  // rows are value-head blocks (z: dv rows each; beta/alpha: 1)
        const uint64_t block = nrows / s.n_v;
        const auto idx = tiled_index(s.n_k, R, block);
        for (uint64_t r = 0; r < nrows; ++r)
          std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(idx[r] * ne0), ne0, y.begin() + static_cast<std::ptrdiff_t>(r * ne0));
        break;
      }
      case Fix::QkvRows: {  // only the V rows after q and k
        const auto idx = tiled_index(s.n_k, R, s.dv);
        for (uint64_t r = 0; r < vd; ++r)
          std::copy_n(x.begin() + static_cast<std::ptrdiff_t>((2 * kd + idx[r]) * ne0), ne0,
                      y.begin() + static_cast<std::ptrdiff_t>((2 * kd + r) * ne0));
        break;
      }
      case Fix::ReorderCols: {  // out_proj [H][vd]: input columns are value-head blocks
        const auto idx = tiled_index(s.n_k, R, s.dv);
        for (uint64_t r = 0; r < nrows; ++r)
          for (uint64_t c = 0; c < ne0; ++c) y[r * ne0 + c] = x[r * ne0 + idx[c]];
        break;
      }
      case Fix::ConvChannels: {  // [cch][1][K] -> rows of K; V channels reordered
        const uint64_t K = s.conv_kernel;
        const auto idx = tiled_index(s.n_k, R, s.dv);
        for (uint64_t r = 0; r < vd; ++r)
          std::copy_n(x.begin() + static_cast<std::ptrdiff_t>((2 * kd + idx[r]) * K), K,
                      y.begin() + static_cast<std::ptrdiff_t>((2 * kd + r) * K));
        break;
      }
    }
    emit(y, nrows, fmt::format("{} (from {})", p.gguf, t.name));
    log(fmt::format("[{}/{}] {} {} {}", i + 1, plan.size(), p.gguf, traits(p.type).name, shape_str(p.ne)));
  }
  w.finish();
  rep.n_tensors = plan.size();
  return rep;
}

namespace {

// Qwen3.6-35B-A3B's text model (its config.json): 40 layers, 3 Gated DeltaNet + 1 gated attention.
QShape qwen36_35b_a3b(uint32_t layers) {
  QShape s;
  s.name = "qwen36-35b-a3b-synthetic";
  s.vocab = 248320, s.hidden = 2048, s.n_layers = layers, s.n_heads = 16, s.n_kv = 2, s.head_dim = 256;
  s.conv_kernel = 4, s.dk = 128, s.dv = 128, s.n_k = 16, s.n_v = 32;
  s.n_experts = 256, s.n_used = 8, s.expert_ff = 512, s.shared_ff = 512;
  s.context = 262144, s.rms_eps = 1e-6, s.rope_theta = 10000000.0, s.partial_rotary = 0.25;
  s.mrope_section = {11, 11, 10, 0};
  s.full_interval = 4;
  for (uint32_t i = 0; i < layers; ++i) s.recurrent.push_back((i + 1) % 4 != 0);
  return s;
}

struct SplitMix {
  uint64_t x;
  uint64_t next() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {  // Box-Muller
    const double u = std::max(uniform(), 1e-300), v = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }
};

}  // namespace

QwenSynthReport synth_qwen36(const QwenSynthOptions& o) {
  if (o.layers < 1 || o.layers > 40) fail("synth qwen36: --layers {} is outside 1..40", o.layers);
  const QShape s = qwen36_35b_a3b(o.layers);
  const std::vector<Plan> plan = build_plan(s, o.recipe, [](uint32_t) { return true; }, true);
  tokenizer::Vocab vocab = byte_vocab(s.vocab);
  vocab.pre = tokenizer::PreTokenizerKind::Qwen35;
  vocab.nfc = true;
  gguf::Writer w(o.out_path);
  add_metadata(w, s);
  tokenizer::vocab_to_gguf(vocab, w);
  for (const auto& p : plan) w.add_tensor(p.gguf, p.type, p.ne);
  w.write_header();
  QwenSynthReport rep;
  std::vector<float> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    SplitMix rng{o.seed * 0x100000001B3ull + i};
    const uint64_t ne0 = p.ne[0];
    uint64_t rows = 1;
    for (size_t d = 1; d < p.ne.size(); ++d) rows *= p.ne[d];
    if (o.sparse == Sparse::All || (o.sparse == Sparse::Experts && p.gguf.find("_exps.") != std::string::npos)) {
      w.skip_tensor_data(rows * row_bytes(traits(p.type), ne0));
      continue;
    }
    // Values of a trained model's order: matrices ~N(0, 1/n_in), norms ~1, decays in (0, 1).
    const std::string& n = p.gguf;
    auto value = [&]() -> float {
      if (n.find("norm") != std::string::npos) return 1.0f + 0.1f * rng.normal();
      if (n.find("ssm_a") != std::string::npos) return -static_cast<float>(0.02 + 0.58 * rng.uniform());
      if (n.find("ssm_dt") != std::string::npos || n.find("conv1d") != std::string::npos) return 0.5f * rng.normal();
      if (n == "token_embd.weight") return rng.normal();
      return rng.normal() / std::sqrt(static_cast<float>(ne0));
    };
    const uint64_t step = std::max<uint64_t>(1, (uint64_t{1} << 22) / ne0);
    for (uint64_t r0 = 0; r0 < rows; r0 += step) {
      const uint64_t nr = std::min(step, rows - r0);
      buf.resize(nr * ne0);
      for (float& v : buf) v = value();
      const auto bytes = encode_rows(p.type, buf.data(), static_cast<int64_t>(nr), static_cast<int64_t>(ne0),
                                     p.gguf.c_str(), o.threads);
      w.write_tensor_data(bytes);
      rep.data_bytes += bytes.size();
    }
    if (o.log) o.log(fmt::format("[{}/{}] {} {} {}", i + 1, plan.size(), p.gguf, traits(p.type).name, shape_str(p.ne)));
  }
  w.finish();
  rep.n_tensors = plan.size();
  return rep;
}

}  // namespace ds4::convert
