#include "model/qwen35moe/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"

namespace ds4::model::qwen35moe {

namespace {

std::string shape_str(const std::vector<uint64_t>& ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }
std::vector<uint64_t> dims(std::initializer_list<int64_t> d) {
  std::vector<uint64_t> v;
  for (int64_t x : d) v.push_back(static_cast<uint64_t>(x));
  return v;
}

}  // namespace

class Binder {
 public:
  Binder(const gguf::File& f, Weights& w) : f_(f), w_(w) {}

  const gguf::TensorInfo& find(const std::string& name) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) fail("{}: missing tensor {}", f_.path(), name);
    return *t;
  }
  void check_shape(const gguf::TensorInfo& t, const std::vector<uint64_t>& want) {
    if (t.ne != want)
      fail("{}: tensor {} has shape {}, expected {}", f_.path(), t.name, shape_str(t.ne), shape_str(want));
  }
  void check_type(const gguf::TensorInfo& t, int64_t n_in) {
    const auto& tr = traits(t.type);
    if (t.type == GgmlType::I32 || t.type == GgmlType::Q8_1 || t.type == GgmlType::Q8_K)
      fail("{}: tensor {} has type {}, expected a matmul type (docs/FORMATS.md)", f_.path(), t.name, tr.name);
    if (n_in % tr.block_elems != 0)
      fail("{}: tensor {}: row length {} is not a multiple of the {} block size {}", f_.path(), t.name, n_in, tr.name,
           tr.block_elems);
  }
  compute::Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool one_d = false) {
    const auto& t = find(name);
    check_shape(t, one_d ? dims({n_in}) : dims({n_in, n_out}));
    check_type(t, n_in);
    return {t.type, t.data, n_in, n_out, row_bytes(traits(t.type), static_cast<uint64_t>(n_in))};
  }
  compute::ExpertSet experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
    const auto& t = find(name);
    check_shape(t, dims({n_in, n_out, n_expert}));
    check_type(t, n_in);
    compute::ExpertSet m;
    const size_t rb = row_bytes(traits(t.type), static_cast<uint64_t>(n_in));
    m.first = {t.type, t.data, n_in, n_out, rb};
    m.n_expert = n_expert;
    m.expert_stride = rb * static_cast<size_t>(n_out);
    return m;
  }
  // f32 data of any shape with these dims (F16/BF16 widened).
  const float* floats(const std::string& name, const std::vector<uint64_t>& want) {
    const auto& t = find(name);
    check_shape(t, want);
    uint64_t n = 1;
    for (uint64_t d : want) n *= d;
    if (t.type == GgmlType::F32) return reinterpret_cast<const float*>(t.data);
    if (t.type != GgmlType::F16 && t.type != GgmlType::BF16)
      fail("{}: tensor {} has type {}, expected f32", f_.path(), t.name, traits(t.type).name);
    auto& buf = w_.widened_.emplace_back(static_cast<size_t>(n));
    const auto* h = reinterpret_cast<const uint16_t*>(t.data);
    for (uint64_t i = 0; i < n; ++i) buf[i] = t.type == GgmlType::F16 ? fp16_to_fp32(h[i]) : bf16_to_fp32(h[i]);
    return buf.data();
  }
  const float* vec(const std::string& name, int64_t n) { return floats(name, dims({n})); }

 private:
  const gguf::File& f_;
  Weights& w_;
};

Weights Weights::bind(const gguf::File& f, HParams& hp) {
  Weights w;
  Binder b(f, w);
  const int64_t d = hp.n_embd;
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) fail("{}: missing tensor token_embd.weight", f.path());
  if (emb->ne.size() != 2) fail("{}: tensor token_embd.weight has shape {}, expected 2 dims", f.path(), shape_str(emb->ne));
  if (hp.n_vocab == 0) hp.n_vocab = static_cast<int64_t>(emb->ne[1]);
  w.token_embd = b.matrix("token_embd.weight", d, hp.n_vocab);
  w.output_norm = b.vec("output_norm.weight", d);
  // Tied embeddings: llama.cpp falls back to token_embd when output.weight is absent.
  w.output = f.find_tensor("output.weight") ? b.matrix("output.weight", d, hp.n_vocab) : w.token_embd;

  const int64_t hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv;
  const int64_t vdim = hp.ssm_n_v * hp.ssm_dv, cch = hp.conv_channels();
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    auto n = [il](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    L.attn_norm = b.vec(n("attn_norm.weight"), d);
    L.post_norm = b.vec(n("post_attention_norm.weight"), d);
    if (hp.is_recurrent(il)) {
      L.wqkv = b.matrix(n("attn_qkv.weight"), d, cch);
      L.wgate = b.matrix(n("attn_gate.weight"), d, vdim);
      L.w_beta = b.matrix(n("ssm_beta.weight"), d, hp.ssm_n_v);
      L.w_alpha = b.matrix(n("ssm_alpha.weight"), d, hp.ssm_n_v);
      L.conv = b.floats(n("ssm_conv1d.weight"), dims({hp.conv_kernel, cch}));
      L.dt_bias = b.vec(n("ssm_dt.bias"), hp.ssm_n_v);
      L.ssm_a = b.vec(n("ssm_a"), hp.ssm_n_v);
      L.ssm_norm = b.vec(n("ssm_norm.weight"), hp.ssm_dv);
      L.ssm_out = b.matrix(n("ssm_out.weight"), vdim, d);
    } else {
      L.wq = b.matrix(n("attn_q.weight"), d, nh * hd * 2);
      L.wk = b.matrix(n("attn_k.weight"), d, nkv * hd);
      L.wv = b.matrix(n("attn_v.weight"), d, nkv * hd);
      L.wo = b.matrix(n("attn_output.weight"), nh * hd, d);
      L.q_norm = b.vec(n("attn_q_norm.weight"), hd);
      L.k_norm = b.vec(n("attn_k_norm.weight"), hd);
    }
    L.router = b.matrix(n("ffn_gate_inp.weight"), d, hp.n_expert);
    L.gate_exps = b.experts(n("ffn_gate_exps.weight"), d, hp.expert_ff, hp.n_expert);
    L.up_exps = b.experts(n("ffn_up_exps.weight"), d, hp.expert_ff, hp.n_expert);
    L.down_exps = b.experts(n("ffn_down_exps.weight"), hp.expert_ff, d, hp.n_expert);
    if (hp.shared_ff > 0) {
      L.shexp_gate = b.matrix(n("ffn_gate_inp_shexp.weight"), d, 1, /*one_d=*/true);
      L.gate_sh = b.matrix(n("ffn_gate_shexp.weight"), d, hp.shared_ff);
      L.up_sh = b.matrix(n("ffn_up_shexp.weight"), d, hp.shared_ff);
      L.down_sh = b.matrix(n("ffn_down_shexp.weight"), hp.shared_ff, d);
    }
  }
  return w;
}

}  // namespace ds4::model::qwen35moe
