#include "model/deepseek4/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"

namespace ds4::model::deepseek4 {

namespace {

bool is_matmul_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q3_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::MXFP4:
    case GgmlType::Q2_K: case GgmlType::Q4_K: case GgmlType::IQ2_XXS: return true;
    default: return false;
  }
}

std::string shape_str(const std::vector<uint64_t>& ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }

}  // namespace

class Binder {
 public:
  Binder(const gguf::File& f, Weights& w) : f_(f), w_(w) {}

  const gguf::TensorInfo* find(const std::string& name, bool required) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t && required) fail("{}: missing tensor {}", f_.path(), name);
    return t;
  }

  void check_shape(const gguf::TensorInfo& t, const std::vector<uint64_t>& want) {
    if (t.ne != want)
      fail("{}: tensor {} has shape {}, expected {}", f_.path(), t.name, shape_str(t.ne), shape_str(want));
  }

  // A weight matrix of n_out rows of n_in, in a type the matmul supports.
  compute::Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool float_only = false) {
    const auto* t = find(name, true);
    return matrix_of(*t, n_in, n_out, float_only);
  }

  compute::Matrix matrix_of(const gguf::TensorInfo& t, int64_t n_in, int64_t n_out, bool float_only) {
    check_shape(t, {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out)});
    check_matmul_type(t, n_in, float_only);
    const auto& tr = traits(t.type);
    return {t.type, t.data, n_in, n_out, row_bytes(tr, static_cast<uint64_t>(n_in))};
  }

  void check_matmul_type(const gguf::TensorInfo& t, int64_t n_in, bool float_only) {
    if (!is_matmul_type(t.type))  // float_only (ape): the CPU backend decodes any of these; CUDA refuses non-float
      fail("{}: tensor {} has type {}, expected {}", f_.path(), t.name, traits(t.type).name,
           float_only ? "a decodable type (docs/FORMATS.md)" : "a matmul type (docs/FORMATS.md)");
    const auto& tr = traits(t.type);
    if (n_in % tr.block_elems != 0)
      fail("{}: tensor {}: row length {} is not a multiple of the {} block size {}", f_.path(), t.name, n_in, tr.name,
           tr.block_elems);
  }

  ExpertMatrix experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
    const auto* t = find(name, true);
    check_shape(*t, {static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_expert)});
    check_matmul_type(*t, n_in, false);
    ExpertMatrix m;
    size_t rb = row_bytes(traits(t->type), static_cast<uint64_t>(n_in));
    m.first = {t->type, t->data, n_in, n_out, rb};
    m.n_expert = n_expert;
    m.expert_stride = rb * static_cast<size_t>(n_out);
    return m;
  }

  // A 1-D f32 vector (F16/BF16 accepted and widened).
  const float* vec(const std::string& name, int64_t n, bool required = true) {
    const auto* t = find(name, required);
    if (!t) return nullptr;
    check_shape(*t, {static_cast<uint64_t>(n)});
    if (t->type == GgmlType::F32) return reinterpret_cast<const float*>(t->data);
    if (t->type != GgmlType::F16 && t->type != GgmlType::BF16)
      fail("{}: tensor {} has type {}, expected f32", f_.path(), t->name, traits(t->type).name);
    auto& buf = w_.widened_.emplace_back(static_cast<size_t>(n));
    const auto* h = reinterpret_cast<const uint16_t*>(t->data);
    for (int64_t i = 0; i < n; ++i) buf[i] = t->type == GgmlType::F16 ? fp16_to_fp32(h[i]) : bf16_to_fp32(h[i]);
    return buf.data();
  }

  const gguf::File& f_;
  Weights& w_;
};

Weights Weights::bind(const gguf::File& f, HParams& hp) {
  Weights w;
  Binder b(f, w);
  const int64_t d = hp.n_embd;
  const int64_t hc = hp.n_hc;
  const int64_t n_mix = (2 + hc) * hc;

  // The embedding fixes the vocabulary when the metadata does not.
  const auto* emb = b.find("token_embd.weight", true);
  if (emb->ne.size() != 2) fail("{}: tensor token_embd.weight has shape {}, expected 2 dims", f.path(), shape_str(emb->ne));
  if (hp.n_vocab == 0) hp.n_vocab = static_cast<int64_t>(emb->ne[1]);
  w.token_embd = b.matrix_of(*emb, d, hp.n_vocab, false);
  w.output_hc_fn = b.matrix("output_hc_fn.weight", hc * d, hc);
  w.output_hc_base = b.vec("output_hc_base.weight", hc);
  w.output_hc_scale = b.vec("output_hc_scale.weight", 1);
  w.output_norm = b.vec("output_norm.weight", d);
  w.output = b.matrix("output.weight", d, hp.n_vocab);

  const int64_t hd = hp.head_dim;
  const int64_t group_in = hp.n_head / hp.o_groups * hd;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    auto n = [il](const char* suffix) { return fmt::format("blk.{}.{}", il, suffix); };
    L.hc_attn_fn = b.matrix(n("hc_attn_fn.weight"), hc * d, n_mix);
    L.hc_attn_base = b.vec(n("hc_attn_base.weight"), n_mix);
    L.hc_attn_scale = b.vec(n("hc_attn_scale.weight"), 3);
    L.attn_norm = b.vec(n("attn_norm.weight"), d);
    L.q_a = b.matrix(n("attn_q_a.weight"), d, hp.q_lora_rank);
    L.q_a_norm = b.vec(n("attn_q_a_norm.weight"), hp.q_lora_rank);
    L.q_b = b.matrix(n("attn_q_b.weight"), hp.q_lora_rank, hp.n_head * hd);
    L.kv = b.matrix(n("attn_kv.weight"), d, hd);
    L.kv_norm = b.vec(n("attn_kv_a_norm.weight"), hd);
    L.sinks = b.vec(n("attn_sinks.weight"), hp.n_head);
    L.out_a = b.matrix(n("attn_output_a.weight"), group_in, hp.o_groups * hp.o_lora_rank);
    L.out_b = b.matrix(n("attn_output_b.weight"), hp.o_groups * hp.o_lora_rank, d);

    const int64_t R = hp.ratio(il);
    if (R > 0) {
      const int64_t lanes = R == 4 ? 2 : 1;  // ratio-4 layers pool overlapping windows
      L.has_compressor = true;
      L.comp.ape = b.matrix(n("attn_compressor_ape.weight"), lanes * hd, R, true);
      L.comp.kv = b.matrix(n("attn_compressor_kv.weight"), d, lanes * hd);
      L.comp.gate = b.matrix(n("attn_compressor_gate.weight"), d, lanes * hd);
      L.comp.norm = b.vec(n("attn_compressor_norm.weight"), hd);
    }
    if (R == 4) {
      const int64_t id = hp.indexer_head_dim;
      L.has_indexer = true;
      L.idx_q_b = b.matrix(n("indexer.attn_q_b.weight"), hp.q_lora_rank, hp.indexer_n_head * id);
      L.idx_proj = b.matrix(n("indexer.proj.weight"), d, hp.indexer_n_head);
      L.idx_comp.ape = b.matrix(n("indexer_compressor_ape.weight"), 2 * id, R, true);
      L.idx_comp.kv = b.matrix(n("indexer_compressor_kv.weight"), d, 2 * id);
      L.idx_comp.gate = b.matrix(n("indexer_compressor_gate.weight"), d, 2 * id);
      L.idx_comp.norm = b.vec(n("indexer_compressor_norm.weight"), id);
    }

    L.hc_ffn_fn = b.matrix(n("hc_ffn_fn.weight"), hc * d, n_mix);
    L.hc_ffn_base = b.vec(n("hc_ffn_base.weight"), n_mix);
    L.hc_ffn_scale = b.vec(n("hc_ffn_scale.weight"), 3);
    L.ffn_norm = b.vec(n("ffn_norm.weight"), d);
    const int64_t n_exp = hp.experts_in(il);  // < n_expert in a pruned layer
    L.router = b.matrix(n("ffn_gate_inp.weight"), d, n_exp);
    L.router_bias = b.vec(n("exp_probs_b.bias"), n_exp, false);
    if (!hp.is_hash_layer(il) && f.find_tensor(n("ffn_gate_tid2eid.weight")))
      fail("{}: tensor {} is present but layer {} is not hash-routed (hash_layer_count = {})", f.path(),
           n("ffn_gate_tid2eid.weight"), il, hp.n_hash_layers);
    if (hp.is_hash_layer(il)) {
      const auto* t = b.find(n("ffn_gate_tid2eid.weight"), true);
      b.check_shape(*t, {static_cast<uint64_t>(hp.n_expert_used), static_cast<uint64_t>(hp.n_vocab)});
      if (t->type != GgmlType::I32)
        fail("{}: tensor {} has type {}, expected i32", f.path(), t->name, traits(t->type).name);
      L.tid2eid = reinterpret_cast<const int32_t*>(t->data);
      // Validate once here so the forward pass can index experts without checks.
      for (int64_t i = 0; i < hp.n_expert_used * hp.n_vocab; ++i)
        if (L.tid2eid[i] < 0 || L.tid2eid[i] >= hp.n_expert)
          fail("{}: tensor {}: element {} = {} is not an expert id in [0, {})", f.path(), t->name, i, L.tid2eid[i],
               hp.n_expert);
    }
    L.gate_exps = b.experts(n("ffn_gate_exps.weight"), d, hp.expert_ff, n_exp);
    L.up_exps = b.experts(n("ffn_up_exps.weight"), d, hp.expert_ff, n_exp);
    if (L.up_exps.first.type != L.gate_exps.first.type)
      fail("{}: blk.{}: ffn_up_exps type {} differs from ffn_gate_exps type {}", f.path(), il,
           traits(L.up_exps.first.type).name, traits(L.gate_exps.first.type).name);
    L.down_exps = b.experts(n("ffn_down_exps.weight"), hp.expert_ff, d, n_exp);
    const int64_t sh_ff = hp.n_expert_shared * hp.expert_ff;
    if (sh_ff == 0) continue;
    L.has_shared = true;
    L.gate_sh = b.matrix(n("ffn_gate_shexp.weight"), d, sh_ff);
    L.up_sh = b.matrix(n("ffn_up_shexp.weight"), d, sh_ff);
    L.down_sh = b.matrix(n("ffn_down_shexp.weight"), sh_ff, d);
  }
  return w;
}

}  // namespace ds4::model::deepseek4
