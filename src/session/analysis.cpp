#include "session/analysis.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quantize/recipe.h"

namespace ds4::session {

quantize::ModelKey model_key(const gguf::File& f, const model::deepseek4::HParams& hp) {
  quantize::ModelKey k;
  k.architecture = f.get_string("general.architecture").value_or("");
  k.name = f.get_string("general.name").value_or("");
  k.n_layer = hp.n_layer;
  k.n_expert = hp.n_expert;
  k.n_expert_used = hp.n_expert_used;
  k.hash_layer.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t l = 0; l < hp.n_layer; ++l) k.hash_layer[static_cast<size_t>(l)] = hp.is_hash_layer(l);
  return k;
}

std::unique_ptr<Analysis> make_analysis(const gguf::File& f, const model::deepseek4::HParams& hp, bool imatrix,
                                        bool profile, const std::string& prune_mask_path) {
  if (!imatrix && !profile && prune_mask_path.empty()) return nullptr;
  // A file with experts dropped (ds4-gguf quantize --prune) no longer numbers its experts as
  // the model did: profiles and masks, which are per original expert id, belong to the unpruned
  // file. (An imatrix of it describes its own tensors and is fine.)
  if ((profile || !prune_mask_path.empty()) && hp.experts_pruned())
    fail("{}: experts were dropped from this file by pruning ({}): collect expert profiles and apply prune masks "
         "on the unpruned file",
         f.path(), f.get_string("ds4.prune.method").value_or("ds4-gguf quantize --prune"));
  auto a = std::make_unique<Analysis>();
  a->key = model_key(f, hp);
  auto& c = *a->cfg;
  c.imatrix = imatrix;
  c.profile = profile;
  c.n_layer = hp.n_layer;
  c.n_expert = hp.n_expert;
  for (const auto& t : f.tensors()) {
    if (t.ne.size() < 2 || t.type == GgmlType::I32) continue;
    compute::KnownWeight w;
    w.data = t.data;
    w.bytes = t.n_bytes;
    w.name = t.name;
    w.n_in = static_cast<int64_t>(t.ne[0]);
    w.n_mat = t.ne.size() >= 3 ? static_cast<int64_t>(t.ne[2]) : 1;
    const int64_t layer = quantize::tensor_layer(t.name);
    if (layer >= 0 && t.name == fmt::format("blk.{}.ffn_gate_inp.weight", layer)) w.router_layer = static_cast<int>(layer);
    // hc_pre scales the raw products fn . flat(X) by the streams' inverse RMS (backend.h).
    if (t.name == "output_hc_fn.weight" || t.name == fmt::format("blk.{}.hc_attn_fn.weight", layer) ||
        t.name == fmt::format("blk.{}.hc_ffn_fn.weight", layer)) {
      w.rms_normalized_input = true;
      w.rms_eps = hp.rms_eps;
    }
    c.weights.push_back(std::move(w));
  }
  if (!prune_mask_path.empty()) {
    const quantize::PruneMask m = quantize::read_mask(prune_mask_path);
    quantize::check_mask(m, a->key, prune_mask_path);
    c.pruned.resize(static_cast<size_t>(hp.n_layer));
    c.layer_bias.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      const auto& p = m.pruned[static_cast<size_t>(l)];
      if (std::find(p.begin(), p.end(), uint8_t{1}) == p.end()) continue;
      c.pruned[static_cast<size_t>(l)] = p;
      if (const auto* b = f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", l))) {
        auto& v = c.layer_bias[static_cast<size_t>(l)];
        v.resize(static_cast<size_t>(hp.n_expert));
        if (b->n_elements() != static_cast<uint64_t>(hp.n_expert)) fail("{}: {} has the wrong size", f.path(), b->name);
        for (int64_t e = 0; e < hp.n_expert; ++e) {
          if (b->type == GgmlType::F32) std::memcpy(&v[e], b->data + 4 * e, 4);
          else if (b->type == GgmlType::F16) v[e] = fp16_to_fp32(reinterpret_cast<const uint16_t*>(b->data)[e]);
          else if (b->type == GgmlType::BF16) v[e] = bf16_to_fp32(reinterpret_cast<const uint16_t*>(b->data)[e]);
          else fail("{}: {} has type {}", f.path(), b->name, traits(b->type).name);
        }
      }
    }
    a->prune_method = m.method;
    a->pruned_experts = m.pruned_count();
  }
  return a;
}

quantize::Imatrix to_imatrix(const Analysis& a) {
  quantize::Imatrix m;
  std::lock_guard<std::mutex> lk(a.stats->mu);
  for (size_t i = 0; i < a.stats->entries.size(); ++i) {
    const auto& e = a.stats->entries[i];
    if (e.sums.empty()) continue;
    quantize::ImatrixEntry q;
    q.ne0 = e.n_in;
    q.sums = e.sums;
    q.counts = e.counts;
    m.entries[a.stats->names[i]] = std::move(q);
  }
  return m;
}

quantize::ExpertProfile to_profile(const Analysis& a) {
  quantize::ExpertProfile p;
  p.reset(a.key);
  std::lock_guard<std::mutex> lk(a.stats->mu);
  p.tokens = a.stats->tokens;
  if (!a.stats->count.empty()) p.count = a.stats->count, p.weight = a.stats->weight;
  return p;
}

}  // namespace ds4::session
