#include "model/qwen35moe/hparams.h"

#include <fmt/format.h>

#include <algorithm>
#include <variant>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::model::qwen35moe {

namespace {

std::string key(const char* suffix) { return fmt::format("{}.{}", kArch, suffix); }

struct Reader {
  const gguf::File& f;
  int64_t req_int(const char* suffix) const {
    auto v = f.get_int(key(suffix));
    if (!v) fail("{}: missing required metadata key {}", f.path(), key(suffix));
    return *v;
  }
  int64_t opt_int(const char* suffix, int64_t def) const { return f.get_int(key(suffix)).value_or(def); }
  double opt_float(const char* suffix, double def) const { return f.get_float(key(suffix)).value_or(def); }
  void positive(const char* suffix, int64_t v) const {
    if (v <= 0) fail("{}: metadata {} = {} must be positive", f.path(), key(suffix), v);
  }
};

}  // namespace

int64_t HParams::n_recurrent() const { return static_cast<int64_t>(std::count(recurrent.begin(), recurrent.end(), true)); }

HParams HParams::from_gguf(const gguf::File& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) fail("{}: missing general.architecture", f.path());
  if (*arch != kArch) fail("{}: general.architecture is '{}', expected '{}'", f.path(), *arch, kArch);
  Reader r{f};
  HParams h;
  h.n_layer = r.req_int("block_count");
  h.n_embd = r.req_int("embedding_length");
  h.n_head = r.req_int("attention.head_count");
  h.n_head_kv = r.req_int("attention.head_count_kv");
  h.head_dim = r.opt_int("attention.key_length", h.n_head > 0 ? h.n_embd / h.n_head : 0);
  const int64_t vlen = r.opt_int("attention.value_length", h.head_dim);
  h.n_rot = r.opt_int("rope.dimension_count", h.head_dim);
  h.rope_base = r.opt_float("rope.freq_base", 10000.0);
  if (auto s = f.get_int_array(key("rope.dimension_sections"))) h.rope_sections = *s;
  h.conv_kernel = r.req_int("ssm.conv_kernel");
  h.ssm_dk = r.req_int("ssm.state_size");
  h.ssm_n_k = r.req_int("ssm.group_count");
  h.ssm_n_v = r.req_int("ssm.time_step_rank");
  const int64_t inner = r.req_int("ssm.inner_size");
  h.n_expert = r.req_int("expert_count");
  h.n_expert_used = r.req_int("expert_used_count");
  h.expert_ff = r.req_int("expert_feed_forward_length");
  h.shared_ff = r.opt_int("expert_shared_feed_forward_length", 0);
  const double ws = r.opt_float("expert_weights_scale", 0.0);
  h.expert_weights_scale = ws == 0.0 ? 1.0f : static_cast<float>(ws);  // llama.cpp: 0 = no scaling
  h.rms_eps = static_cast<float>(r.opt_float("attention.layer_norm_rms_epsilon", 1e-6));
  h.context_length = r.opt_int("context_length", 0);
  // llama.cpp's files carry no vocab_size for qwen35moe: the vocabulary is token_embd's second
  // dimension (Weights::bind checks the tensor). Taken here so that everything sized from the
  // hyperparameters before the weights are bound (the memory plan's logits, the residency
  // plan's scratch) sees it too.
  if (auto v = f.get_int(key("vocab_size"))) h.n_vocab = *v;
  else if (const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight"); emb && emb->ne.size() == 2)
    h.n_vocab = static_cast<int64_t>(emb->ne[1]);

  for (const char* k : {"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                        "ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank",
                        "expert_count", "expert_used_count", "expert_feed_forward_length"})
    r.positive(k, r.req_int(k));
  r.positive("ssm.inner_size", inner);
  if (h.head_dim <= 0) fail("{}: attention head size {} must be positive", f.path(), h.head_dim);
  if (vlen != h.head_dim)
    fail("{}: {} = {} differs from {} = {} (gated attention needs equal key and value heads)", f.path(),
         key("attention.value_length"), vlen, key("attention.key_length"), h.head_dim);
  if (h.n_head % h.n_head_kv != 0)
    fail("{}: {} query heads do not group over {} KV heads", f.path(), h.n_head, h.n_head_kv);
  if (h.n_rot <= 0 || h.n_rot > h.head_dim || h.n_rot % 2 != 0)
    fail("{}: {} = {} must be even and within the head size {}", f.path(), key("rope.dimension_count"), h.n_rot,
         h.head_dim);
  if (inner % h.ssm_n_v != 0)
    fail("{}: {} = {} is not a multiple of the {} value heads", f.path(), key("ssm.inner_size"), inner, h.ssm_n_v);
  h.ssm_dv = inner / h.ssm_n_v;
  if (h.ssm_n_v % h.ssm_n_k != 0)
    fail("{}: {} value heads do not tile over {} key heads", f.path(), h.ssm_n_v, h.ssm_n_k);
  if (h.n_expert_used > h.n_expert)
    fail("{}: {} experts used of {}", f.path(), h.n_expert_used, h.n_expert);

  // Layer layout: the explicit per-layer flags, else every interval-th layer is full attention.
  if (const gguf::Value* v = f.find(key("attention.recurrent_layers"))) {
    const auto* a = std::get_if<gguf::Array>(&v->v);
    if (!a) fail("{}: {} is {}, expected an array", f.path(), key("attention.recurrent_layers"), gguf::describe_type(*v));
    if (static_cast<int64_t>(a->items.size()) < h.n_layer)
      fail("{}: {} has {} entries for {} layers", f.path(), key("attention.recurrent_layers"), a->items.size(),
           h.n_layer);
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const auto& it = a->items[static_cast<size_t>(il)];
      if (const bool* b = std::get_if<bool>(&it.v)) h.recurrent.push_back(*b);
      else if (const uint64_t* u = std::get_if<uint64_t>(&it.v)) h.recurrent.push_back(*u != 0);
      else if (const int64_t* i = std::get_if<int64_t>(&it.v)) h.recurrent.push_back(*i != 0);
      else fail("{}: {} entry {} is not a bool", f.path(), key("attention.recurrent_layers"), il);
    }
  } else {
    const int64_t interval = r.opt_int("full_attention_interval", 4);
    r.positive("full_attention_interval", interval);
    for (int64_t il = 0; il < h.n_layer; ++il) h.recurrent.push_back((il + 1) % interval != 0);
  }
  return h;
}

std::string HParams::describe() const {
  std::string layout;
  for (bool b : recurrent) layout += b ? 'L' : 'A';
  return fmt::format(
      "qwen35moe: {} layers ({}; L = Gated DeltaNet, A = gated attention), d={}, vocab {}, attention {}x{} on {} KV "
      "heads (rope {} of {}, base {}), DeltaNet {} key / {} value heads of {}/{} (conv {}), {} experts top-{} of "
      "width {}, shared {}",
      n_layer, layout, n_embd, n_vocab, n_head, head_dim, n_head_kv, n_rot, head_dim, rope_base, ssm_n_k, ssm_n_v,
      ssm_dk, ssm_dv, conv_kernel, n_expert, n_expert_used, expert_ff, shared_ff);
}

}  // namespace ds4::model::qwen35moe
