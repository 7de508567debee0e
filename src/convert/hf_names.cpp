// Name table from spec §3 (HF checkpoint column) plus transformers' module names.
#include "convert/hf_names.h"

#include <charconv>
#include <utility>

#include "core/error.h"

namespace ds4::convert {

namespace {

struct Alias {
  std::string_view hf;
  std::string_view gguf;
};

constexpr Alias kGlobal[] = {
    {"embed.weight", "token_embd.weight"},
    {"embed_tokens.weight", "token_embd.weight"},
    {"head.weight", "output.weight"},
    {"lm_head.weight", "output.weight"},
    {"norm.weight", "output_norm.weight"},
    {"hc_head_fn", "output_hc_fn.weight"},
    {"hc_head.hc_fn", "output_hc_fn.weight"},
    {"hc_head_base", "output_hc_base.weight"},
    {"hc_head.hc_base", "output_hc_base.weight"},
    {"hc_head_scale", "output_hc_scale.weight"},
    {"hc_head.hc_scale", "output_hc_scale.weight"},
};

// Per-layer suffixes (after "layers.N.").
constexpr Alias kLayer[] = {
    {"hc_attn_fn", "hc_attn_fn.weight"},
    {"attn_hc.fn", "hc_attn_fn.weight"},
    {"hc_attn_base", "hc_attn_base.weight"},
    {"attn_hc.base", "hc_attn_base.weight"},
    {"hc_attn_scale", "hc_attn_scale.weight"},
    {"attn_hc.scale", "hc_attn_scale.weight"},
    {"hc_ffn_fn", "hc_ffn_fn.weight"},
    {"ffn_hc.fn", "hc_ffn_fn.weight"},
    {"hc_ffn_base", "hc_ffn_base.weight"},
    {"ffn_hc.base", "hc_ffn_base.weight"},
    {"hc_ffn_scale", "hc_ffn_scale.weight"},
    {"ffn_hc.scale", "hc_ffn_scale.weight"},
    {"attn_norm.weight", "attn_norm.weight"},
    {"input_layernorm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"attn.wq_a.weight", "attn_q_a.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"attn.q_norm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_a_norm.weight", "attn_q_a_norm.weight"},
    {"attn.wq_b.weight", "attn_q_b.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"attn.wkv.weight", "attn_kv.weight"},
    {"self_attn.kv_proj.weight", "attn_kv.weight"},
    {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.norm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.attn_sink", "attn_sinks.weight"},
    {"self_attn.sinks", "attn_sinks.weight"},
    {"attn.wo_a.weight", "attn_output_a.weight"},
    {"self_attn.o_a_proj.weight", "attn_output_a.weight"},
    {"attn.wo_b.weight", "attn_output_b.weight"},
    {"self_attn.o_b_proj.weight", "attn_output_b.weight"},
    {"attn.compressor.ape", "attn_compressor_ape.weight"},
    {"self_attn.compressor.position_bias", "attn_compressor_ape.weight"},
    {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
    {"self_attn.compressor.kv_proj.weight", "attn_compressor_kv.weight"},
    {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
    {"self_attn.compressor.gate_proj.weight", "attn_compressor_gate.weight"},
    {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
    {"attn.compressor.kv_norm.weight", "attn_compressor_norm.weight"},
    {"self_attn.compressor.kv_norm.weight", "attn_compressor_norm.weight"},
    {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"self_attn.compressor.indexer.q_b_proj.weight", "indexer.attn_q_b.weight"},
    {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
    {"self_attn.compressor.indexer.scorer.weights_proj.weight", "indexer.proj.weight"},
    {"attn.indexer.compressor.ape", "indexer_compressor_ape.weight"},
    {"self_attn.compressor.indexer.position_bias", "indexer_compressor_ape.weight"},
    {"attn.indexer.compressor.wkv.weight", "indexer_compressor_kv.weight"},
    {"self_attn.compressor.indexer.kv_proj.weight", "indexer_compressor_kv.weight"},
    {"attn.indexer.compressor.wgate.weight", "indexer_compressor_gate.weight"},
    {"self_attn.compressor.indexer.gate_proj.weight", "indexer_compressor_gate.weight"},
    {"attn.indexer.compressor.norm.weight", "indexer_compressor_norm.weight"},
    {"attn.indexer.compressor.kv_norm.weight", "indexer_compressor_norm.weight"},
    {"self_attn.compressor.indexer.kv_norm.weight", "indexer_compressor_norm.weight"},
    {"ffn.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"ffn.gate.bias", "exp_probs_b.bias"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"ffn.gate.tid2eid", "ffn_gate_tid2eid.weight"},
    {"mlp.gate.tid2eid", "ffn_gate_tid2eid.weight"},
    {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};

// Per-expert matrices (after "layers.N.<prefix>.E."): official w1/w3/w2, transformers 4 style.
constexpr Alias kExpert[] = {
    {"w1.weight", "ffn_gate_exps.weight"},   {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"w3.weight", "ffn_up_exps.weight"},     {"up_proj.weight", "ffn_up_exps.weight"},
    {"w2.weight", "ffn_down_exps.weight"},   {"down_proj.weight", "ffn_down_exps.weight"},
};

// Parses a leading decimal number followed by '.'; advances `s` past it.
std::optional<int> take_index(std::string_view& s) {
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || p == s.data() + s.size() || *p != '.' || v < 0) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(p - s.data()) + 1);
  return v;
}

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

}  // namespace

MappedName map_hf_name(std::string_view full) {
  std::string_view n = full;
  if (n.starts_with("model.")) n.remove_prefix(6);
  MappedName m;
  if (n.starts_with("mtp.")) {
    m.kind = MappedName::Kind::Ignored;
    return m;
  }
  // Known names first: "attn_hc.scale" / "hc_head.hc_scale" are HC parameters, not FP8 scales.
  auto unknown = [&]() -> MappedName {
    for (std::string_view suf : {std::string_view(".weight_scale_inv"), std::string_view(".scale")}) {
      if (!ends_with(n, suf)) continue;
      const std::string weight = std::string(full.substr(0, full.size() - suf.size())) + ".weight";
      MappedName w;
      try {
        w = map_hf_name(weight);
      } catch (const Error&) {
        fail("tensor '{}' looks like a block scale, but '{}' is not a DeepSeek V4 weight", full, weight);
      }
      if (w.kind == MappedName::Kind::Whole) w.kind = MappedName::Kind::Scale;
      else if (w.kind == MappedName::Kind::Expert) w.kind = MappedName::Kind::ExpertScale;
      else fail("tensor '{}': block scales of '{}' are not supported", full, weight);
      return w;
    }
    fail("tensor '{}' is not part of a DeepSeek V4 checkpoint", full);
  };
  for (const auto& a : kGlobal)
    if (n == a.hf) {
      m.gguf = a.gguf;
      return m;
    }
  if (!n.starts_with("layers.")) return unknown();
  std::string_view rest = n.substr(7);
  auto layer = take_index(rest);
  if (!layer) fail("tensor '{}': expected a layer index after 'layers.'", full);
  m.layer = *layer;
  auto blk = [&](std::string_view suffix) { return "blk." + std::to_string(*layer) + "." + std::string(suffix); };

  for (const auto& a : kLayer)
    if (rest == a.hf) {
      m.gguf = blk(a.gguf);
      return m;
    }
  if (rest == "mlp.experts.gate_up_proj") {
    m.kind = MappedName::Kind::GateUpStack;
    m.gguf = blk("ffn_gate_exps.weight");
    return m;
  }
  if (rest == "mlp.experts.down_proj") {
    m.kind = MappedName::Kind::DownStack;
    m.gguf = blk("ffn_down_exps.weight");
    return m;
  }
  for (std::string_view prefix : {std::string_view("ffn.experts."), std::string_view("mlp.experts.")}) {
    if (!rest.starts_with(prefix)) continue;
    std::string_view r = rest.substr(prefix.size());
    auto e = take_index(r);
    if (!e) break;
    for (const auto& a : kExpert)
      if (r == a.hf) {
        m.kind = MappedName::Kind::Expert;
        m.expert = *e;
        m.gguf = blk(a.gguf);
        return m;
      }
  }
  return unknown();
}

}  // namespace ds4::convert
