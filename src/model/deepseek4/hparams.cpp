#include "model/deepseek4/hparams.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::model::deepseek4 {

namespace {

constexpr const char* kArch = "deepseek4";

std::string key(const char* suffix) { return fmt::format("{}.{}", kArch, suffix); }

struct Reader {
  const gguf::File& f;

  int64_t req_int(const char* suffix) const {
    auto v = f.get_int(key(suffix));
    if (!v) fail("{}: missing required metadata key {}", f.path(), key(suffix));
    return *v;
  }
  int64_t opt_int(const char* suffix, int64_t def) const {
    auto v = f.get_int(key(suffix));
    return v ? *v : def;
  }
  double opt_float(const char* suffix, double def) const {
    auto v = f.get_float(key(suffix));
    return v ? *v : def;
  }
  double req_float(const char* suffix) const {
    auto v = f.get_float(key(suffix));
    if (!v) fail("{}: missing required metadata key {}", f.path(), key(suffix));
    return *v;
  }
  void positive(const char* suffix, int64_t v) const {
    if (v <= 0) fail("{}: metadata {} = {} must be positive", f.path(), key(suffix), v);
  }
};

}  // namespace

HParams HParams::from_gguf(const gguf::File& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) fail("{}: missing general.architecture", f.path());
  if (*arch != kArch) fail("{}: general.architecture is '{}', expected '{}'", f.path(), *arch, kArch);

  Reader r{f};
  HParams h;
  h.n_layer = r.req_int("block_count");
  h.n_embd = r.req_int("embedding_length");
  h.n_head = r.req_int("attention.head_count");
  h.n_head_kv = r.opt_int("attention.head_count_kv", 1);
  h.head_dim = r.req_int("attention.key_length");
  int64_t vlen = r.opt_int("attention.value_length", h.head_dim);
  h.n_rot = r.req_int("rope.dimension_count");
  h.q_lora_rank = r.req_int("attention.q_lora_rank");
  h.o_groups = r.req_int("attention.output_group_count");
  h.o_lora_rank = r.req_int("attention.output_lora_rank");
  h.sliding_window = r.req_int("attention.sliding_window");
  h.indexer_n_head = r.opt_int("attention.indexer.head_count", 0);
  h.indexer_head_dim = r.opt_int("attention.indexer.key_length", 0);
  h.indexer_top_k = r.opt_int("attention.indexer.top_k", 0);
  h.n_expert = r.req_int("expert_count");
  h.n_expert_used = r.req_int("expert_used_count");
  h.expert_ff = r.req_int("expert_feed_forward_length");
  h.n_expert_shared = r.opt_int("expert_shared_count", 1);
  // Without the key, the hash-routed layers are the leading layers that carry a tid2eid table.
  if (auto v = f.get_int(key("hash_layer_count"))) {
    h.n_hash_layers = *v;
  } else {
    while (f.find_tensor(fmt::format("blk.{}.ffn_gate_tid2eid.weight", h.n_hash_layers))) ++h.n_hash_layers;
  }
  h.expert_weights_norm = f.get_bool(key("expert_weights_norm")).value_or(true);
  h.expert_weights_scale = static_cast<float>(r.opt_float("expert_weights_scale", 1.5));  // Flash value
  h.n_hc = static_cast<int>(r.req_int("hyper_connection.count"));
  h.sinkhorn_iters = static_cast<int>(r.req_int("hyper_connection.sinkhorn_iterations"));
  h.hc_eps = static_cast<float>(r.opt_float("hyper_connection.epsilon", 1e-6));
  h.rms_eps = static_cast<float>(r.opt_float("attention.layer_norm_rms_epsilon", 1e-6));
  h.context_length = r.opt_int("context_length", 0);

  for (auto [name, v] : {std::pair{"block_count", h.n_layer}, {"embedding_length", h.n_embd},
                         {"attention.head_count", h.n_head}, {"attention.key_length", h.head_dim},
                         {"rope.dimension_count", h.n_rot}, {"attention.q_lora_rank", h.q_lora_rank},
                         {"attention.output_group_count", h.o_groups}, {"attention.output_lora_rank", h.o_lora_rank},
                         {"attention.sliding_window", h.sliding_window}, {"expert_count", h.n_expert},
                         {"expert_used_count", h.n_expert_used}, {"expert_feed_forward_length", h.expert_ff},
                         {"hyper_connection.count", int64_t{h.n_hc}},
                         {"hyper_connection.sinkhorn_iterations", int64_t{h.sinkhorn_iters}}})
    r.positive(name, v);

  // Sizes not tied to any tensor shape (so not bounded by the file) get sanity limits here,
  // so a corrupt value is an error rather than a huge allocation.
  if (h.sliding_window > (int64_t{1} << 20))
    fail("{}: {} = {} is implausibly large (limit 1048576)", f.path(), key("attention.sliding_window"), h.sliding_window);
  if (h.sinkhorn_iters > 10000)
    fail("{}: {} = {} is implausibly large (limit 10000)", f.path(), key("hyper_connection.sinkhorn_iterations"),
         h.sinkhorn_iters);
  if (h.n_head_kv != 1) fail("{}: {} = {}: only one shared KV head is supported", f.path(), key("attention.head_count_kv"), h.n_head_kv);
  if (vlen != h.head_dim) fail("{}: value_length {} != key_length {} (K = V is required)", f.path(), vlen, h.head_dim);
  if (h.n_rot % 2 != 0 || h.n_rot > h.head_dim)
    fail("{}: rope.dimension_count {} must be even and <= head dim {}", f.path(), h.n_rot, h.head_dim);
  if (h.n_head % h.o_groups != 0)
    fail("{}: head_count {} is not a multiple of output_group_count {}", f.path(), h.n_head, h.o_groups);
  if (h.n_expert_used > h.n_expert)
    fail("{}: expert_used_count {} > expert_count {}", f.path(), h.n_expert_used, h.n_expert);
  if (h.n_hash_layers < 0 || h.n_hash_layers > h.n_layer)
    fail("{}: hash_layer_count {} out of range [0, {}]", f.path(), h.n_hash_layers, h.n_layer);
  // llama.cpp's gating id for sqrt(softplus) is 4; any other scoring is a different model.
  if (auto g = f.get_int(key("expert_gating_func")); g && *g != 4)
    fail("{}: {} = {}, expected 4 (sqrtsoftplus)", f.path(), key("expert_gating_func"), *g);
  auto g_group = f.get_int(key("expert_group_count"));
  if (g_group && *g_group > 1) fail("{}: expert groups ({}) are not used by DeepSeek V4", f.path(), *g_group);

  // Vocabulary: deepseek4.vocab_size, else the token list length; the embedding shape is
  // checked against it when weights are bound.
  if (auto v = f.get_int(key("vocab_size"))) {
    h.n_vocab = *v;
  } else if (auto toks = f.get_string_array("tokenizer.ggml.tokens")) {
    h.n_vocab = static_cast<int64_t>(toks->size());
  }  // else: taken from token_embd's shape by the binder

  auto ratios = f.get_int_array(key("attention.compress_ratios"));
  if (!ratios) fail("{}: missing required metadata key {}", f.path(), key("attention.compress_ratios"));
  if (static_cast<int64_t>(ratios->size()) < h.n_layer)
    fail("{}: {} has {} entries, need at least block_count = {}", f.path(), key("attention.compress_ratios"),
         ratios->size(), h.n_layer);
  h.compress_ratio.assign(ratios->begin(), ratios->begin() + h.n_layer);  // trailing entries: MTP
  bool any_csa = false;
  for (int64_t il = 0; il < h.n_layer; ++il) {
    int64_t R = h.compress_ratio[il];
    if (R < 0 || R == 1) fail("{}: compress_ratios[{}] = {} (must be 0 or >= 2)", f.path(), il, R);
    if (R == 4) any_csa = true;
  }
  if (any_csa) {
    for (auto [name, v] : {std::pair{"attention.indexer.head_count", h.indexer_n_head},
                           {"attention.indexer.key_length", h.indexer_head_dim},
                           {"attention.indexer.top_k", h.indexer_top_k}})
      r.positive(name, v);
    if (h.n_rot > h.indexer_head_dim)
      fail("{}: rope.dimension_count {} > indexer key_length {}", f.path(), h.n_rot, h.indexer_head_dim);
  }

  // Pruned files (ds4-gguf quantize --prune): the routed-expert count of every layer.
  h.n_expert_layer.assign(static_cast<size_t>(h.n_layer), h.n_expert);
  if (auto per = f.get_int_array(key("expert_count_per_layer"))) {
    if (static_cast<int64_t>(per->size()) != h.n_layer)
      fail("{}: {} has {} entries, need block_count = {}", f.path(), key("expert_count_per_layer"), per->size(), h.n_layer);
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const int64_t c = (*per)[static_cast<size_t>(il)];
      if (c < h.n_expert_used || c > h.n_expert)
        fail("{}: {}[{}] = {} must be in [expert_used_count = {}, expert_count = {}]", f.path(),
             key("expert_count_per_layer"), il, c, h.n_expert_used, h.n_expert);
      if (h.is_hash_layer(il) && c != h.n_expert)
        fail("{}: {}[{}] = {}: layer {} is hash-routed and must hold all {} experts", f.path(),
             key("expert_count_per_layer"), il, c, il, h.n_expert);
      h.n_expert_layer[static_cast<size_t>(il)] = c;
    }
  }

  h.swiglu_limit.assign(static_cast<size_t>(h.n_layer), 0.0f);
  if (auto lim = f.get_float_array(key("swiglu_clamp_exp"))) {
    if (static_cast<int64_t>(lim->size()) < h.n_layer)
      fail("{}: {} has {} entries, need block_count = {}", f.path(), key("swiglu_clamp_exp"), lim->size(), h.n_layer);
    for (int64_t il = 0; il < h.n_layer; ++il) h.swiglu_limit[il] = static_cast<float>((*lim)[il]);
  }

  // RoPE. SWA-only layers: plain base. Compressed layers: their own base plus YaRN when the
  // file carries a scaling factor > 1 (Flash: 160000, factor 16, original 65536, beta 32/1).
  h.rope_swa.n_rot = h.n_rot;
  h.rope_swa.freq_base = r.opt_float("rope.freq_base", 10000.0);
  h.rope_compressed.n_rot = h.n_rot;
  h.rope_compressed.freq_base = r.opt_float("attention.compress_rope_freq_base", 160000.0);  // Flash value
  // YaRN only when the file asks for it: a file without scaling keys (a toy model without
  // rope_scaling) gets plain RoPE on its compressed layers too.
  h.rope_compressed.yarn_factor = r.opt_float("rope.scaling.factor", 1.0);
  if (auto type = f.get_string(key("rope.scaling.type"));
      type && *type != "yarn" && *type != "none" && h.rope_compressed.yarn_factor > 1.0)
    fail("{}: {} = '{}' is not supported (only yarn)", f.path(), key("rope.scaling.type"), *type);
  if (auto type = f.get_string(key("rope.scaling.type")); type && *type == "none") h.rope_compressed.yarn_factor = 1.0;
  h.rope_compressed.yarn_orig_ctx = static_cast<double>(r.opt_int("rope.scaling.original_context_length", 0));
  h.rope_compressed.yarn_beta_fast = r.opt_float("rope.scaling.yarn_beta_fast", 32.0);
  h.rope_compressed.yarn_beta_slow = r.opt_float("rope.scaling.yarn_beta_slow", 1.0);
  if (h.rope_compressed.yarn_factor > 1.0 && h.rope_compressed.yarn_orig_ctx <= 0)
    fail("{}: rope.scaling.factor {} needs rope.scaling.original_context_length", f.path(),
         h.rope_compressed.yarn_factor);
  if (h.rope_swa.freq_base <= 1 || h.rope_compressed.freq_base <= 1)
    fail("{}: RoPE bases must be > 1 (got {}, {})", f.path(), h.rope_swa.freq_base, h.rope_compressed.freq_base);
  return h;
}

bool HParams::experts_pruned() const {
  for (int64_t c : n_expert_layer)
    if (c != n_expert) return true;
  return false;
}

std::string HParams::describe() const {
  return fmt::format(
      "deepseek4: {} layers, d={}, vocab={}, heads={}x{} (rope {}), q_lora={}, o={}x{}, window={}, "
      "indexer {}x{} top{}, experts {}/{} ff={} shared={}, hash layers={}, hc={}, ratios={}",
      n_layer, n_embd, n_vocab, n_head, head_dim, n_rot, q_lora_rank, o_groups, o_lora_rank, sliding_window,
      indexer_n_head, indexer_head_dim, indexer_top_k, n_expert_used, n_expert, expert_ff, n_expert_shared,
      n_hash_layers, n_hc, compress_ratio);
}

}  // namespace ds4::model::deepseek4
