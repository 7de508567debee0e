// Tensor table of spec §3, generalized over ModelShape (Flash values in the comments).
#include "convert/gguf_layout.h"

#include "core/error.h"

namespace ds4::convert {

std::optional<Recipe> recipe_from_name(std::string_view n) {
  if (n == "f32") return Recipe::F32;
  if (n == "f16") return Recipe::F16;
  if (n == "q8_0") return Recipe::Q8_0;
  if (n == "flash-q2") return Recipe::FlashQ2;
  if (n == "flash-q4") return Recipe::FlashQ4;
  if (n == "mxfp4-moe") return Recipe::Mxfp4Moe;
  return std::nullopt;
}

std::string_view recipe_name(Recipe r) {
  switch (r) {
    case Recipe::F32: return "f32";
    case Recipe::F16: return "f16";
    case Recipe::Q8_0: return "q8_0";
    case Recipe::FlashQ2: return "flash-q2";
    case Recipe::FlashQ4: return "flash-q4";
    case Recipe::Mxfp4Moe: return "mxfp4-moe";
  }
  return "?";
}

namespace {

// The type a role gets under a recipe before row-length checks.
GgmlType wanted_type(Role role, Recipe r, bool down) {
  if (role == Role::Tid2eid) return GgmlType::I32;
  if (role == Role::Vector || r == Recipe::F32) return GgmlType::F32;
  if (r == Recipe::F16) return GgmlType::F16;
  switch (role) {
    case Role::TokenEmbd:
    case Role::HcFn:
    case Role::AuxMatrix:
    case Role::Ape:
      return GgmlType::F16;
    case Role::Output:
    case Role::AttnMatrix:
    case Role::SharedExpert:
      return GgmlType::Q8_0;
    case Role::ExpertGateUp:
    case Role::ExpertDown:
      if (r == Recipe::Q8_0) return GgmlType::Q8_0;
      if (r == Recipe::FlashQ4) return GgmlType::Q4_K;
      if (r == Recipe::Mxfp4Moe) return GgmlType::MXFP4;
      return down ? GgmlType::Q2_K : GgmlType::IQ2_XXS;
    default:
      return GgmlType::F32;
  }
}

struct Builder {
  const ModelShape& s;
  Recipe r;
  std::vector<TensorPlan> out;

  void add(std::string name, std::vector<uint64_t> ne, Role role, int layer, bool down = false) {
    TensorPlan t;
    t.name = std::move(name);
    t.ne = std::move(ne);
    t.role = role;
    t.layer = layer;
    t.type = wanted_type(role, r, down);
    const uint32_t block = traits(t.type).block_elems;
    if (t.ne[0] % block != 0) {
      if (role == Role::ExpertGateUp || role == Role::ExpertDown) {
        if (t.type != GgmlType::Q8_0)
          fail("recipe {}: tensor {} needs {} rows, a multiple of {}, but ne0 = {}; use --type q8_0, f16 or f32",
               recipe_name(r), t.name, traits(t.type).name, block, t.ne[0]);
      }
      // Q8_0 with a short row: keep it exact in F16 rather than fail.
      t.note = fmt::format("{} needs ne0 % {} == 0, ne0 = {}: stored as f16", traits(t.type).name, block, t.ne[0]);
      t.type = GgmlType::F16;
    }
    out.push_back(std::move(t));
  }
};

}  // namespace

std::vector<TensorPlan> plan_tensors(const ModelShape& s, Recipe r) {
  if (s.compress_ratios.size() != s.n_layers) fail("model shape: {} compress ratios for {} layers", s.compress_ratios.size(), s.n_layers);
  Builder b{s, r, {}};
  const uint64_t H = s.hidden, V = s.vocab, hc = s.hc_mult;
  const uint64_t hc_mix = (2 + hc) * hc;  // pre (hc) + post (hc) + comb (hc*hc): 24 for hc = 4

  b.add("token_embd.weight", {H, V}, Role::TokenEmbd, -1);
  b.add("output_hc_fn.weight", {hc * H, hc}, Role::HcFn, -1);
  b.add("output_hc_base.weight", {hc}, Role::Vector, -1);
  b.add("output_hc_scale.weight", {1}, Role::Vector, -1);
  b.add("output_norm.weight", {H}, Role::Vector, -1);
  b.add("output.weight", {H, V}, Role::Output, -1);

  for (uint32_t il = 0; il < s.n_layers; ++il) {
    const int L = static_cast<int>(il);
    auto n = [&](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    const uint64_t ratio = s.compress_ratios[il];
    const uint64_t hd = s.head_dim, ihd = s.indexer_head_dim;

    b.add(n("hc_attn_fn.weight"), {hc * H, hc_mix}, Role::HcFn, L);
    b.add(n("hc_attn_base.weight"), {hc_mix}, Role::Vector, L);
    b.add(n("hc_attn_scale.weight"), {3}, Role::Vector, L);
    b.add(n("attn_norm.weight"), {H}, Role::Vector, L);
    b.add(n("attn_q_a.weight"), {H, s.q_lora_rank}, Role::AttnMatrix, L);
    b.add(n("attn_q_a_norm.weight"), {s.q_lora_rank}, Role::Vector, L);
    b.add(n("attn_q_b.weight"), {s.q_lora_rank, uint64_t{s.n_heads} * hd}, Role::AttnMatrix, L);
    b.add(n("attn_kv.weight"), {H, hd}, Role::AttnMatrix, L);
    b.add(n("attn_kv_a_norm.weight"), {hd}, Role::Vector, L);
    b.add(n("attn_sinks.weight"), {s.n_heads}, Role::Vector, L);
    b.add(n("attn_output_a.weight"), {uint64_t{s.n_heads} * hd / s.o_groups, uint64_t{s.o_groups} * s.o_lora_rank},
          Role::AttnMatrix, L);
    b.add(n("attn_output_b.weight"), {uint64_t{s.o_groups} * s.o_lora_rank, H}, Role::AttnMatrix, L);
    if (ratio != 0) {
      const uint64_t lanes = ratio == 4 ? 2 : 1;  // ratio 4 keeps two overlapping lanes (spec §6.5)
      b.add(n("attn_compressor_ape.weight"), {lanes * hd, ratio}, Role::Ape, L);
      b.add(n("attn_compressor_kv.weight"), {H, lanes * hd}, Role::AuxMatrix, L);
      b.add(n("attn_compressor_gate.weight"), {H, lanes * hd}, Role::AuxMatrix, L);
      b.add(n("attn_compressor_norm.weight"), {hd}, Role::Vector, L);
    }
    if (ratio == 4) {
      b.add(n("indexer.attn_q_b.weight"), {s.q_lora_rank, uint64_t{s.indexer_heads} * ihd}, Role::AuxMatrix, L);
      b.add(n("indexer.proj.weight"), {H, s.indexer_heads}, Role::AuxMatrix, L);
      b.add(n("indexer_compressor_ape.weight"), {2 * ihd, 4}, Role::Ape, L);
      b.add(n("indexer_compressor_kv.weight"), {H, 2 * ihd}, Role::AuxMatrix, L);
      b.add(n("indexer_compressor_gate.weight"), {H, 2 * ihd}, Role::AuxMatrix, L);
      b.add(n("indexer_compressor_norm.weight"), {ihd}, Role::Vector, L);
    }
    b.add(n("hc_ffn_fn.weight"), {hc * H, hc_mix}, Role::HcFn, L);
    b.add(n("hc_ffn_base.weight"), {hc_mix}, Role::Vector, L);
    b.add(n("hc_ffn_scale.weight"), {3}, Role::Vector, L);
    b.add(n("ffn_norm.weight"), {H}, Role::Vector, L);
    b.add(n("ffn_gate_inp.weight"), {H, s.n_experts}, Role::AuxMatrix, L);
    if (il >= s.n_hash_layers) b.add(n("exp_probs_b.bias"), {s.n_experts}, Role::Vector, L);
    else b.add(n("ffn_gate_tid2eid.weight"), {s.n_experts_used, V}, Role::Tid2eid, L);
    b.add(n("ffn_gate_exps.weight"), {H, s.expert_ffn, s.n_experts}, Role::ExpertGateUp, L);
    b.add(n("ffn_up_exps.weight"), {H, s.expert_ffn, s.n_experts}, Role::ExpertGateUp, L);
    b.add(n("ffn_down_exps.weight"), {s.expert_ffn, H, s.n_experts}, Role::ExpertDown, L, true);
    b.add(n("ffn_gate_shexp.weight"), {H, s.shared_ffn}, Role::SharedExpert, L);
    b.add(n("ffn_up_shexp.weight"), {H, s.shared_ffn}, Role::SharedExpert, L);
    b.add(n("ffn_down_shexp.weight"), {s.shared_ffn, H}, Role::SharedExpert, L);
  }
  return b.out;
}

}  // namespace ds4::convert
