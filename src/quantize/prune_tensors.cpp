#include "quantize/prune_tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "core/error.h"
#include "quantize/recipe.h"

namespace ds4::quantize {

namespace {

int64_t req_int(const gguf::File& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) fail("{}: missing metadata key {}", f.path(), key);
  return *v;
}

}  // namespace

ModelKey file_model_key(const gguf::File& f) {
  ModelKey k;
  k.architecture = f.get_string("general.architecture").value_or("");
  if (k.architecture.empty()) fail("{}: no general.architecture", f.path());
  k.name = f.get_string("general.name").value_or("");
  const std::string a = k.architecture + ".";
  k.n_layer = req_int(f, a + "block_count");
  k.n_expert = req_int(f, a + "expert_count");
  k.n_expert_used = req_int(f, a + "expert_used_count");
  if (k.n_layer < 1 || k.n_layer > 4096 || k.n_expert < 1 || k.n_expert > 65536)
    fail("{}: implausible block_count {} / expert_count {}", f.path(), k.n_layer, k.n_expert);
  int64_t n_hash = 0;
  if (auto v = f.get_int(a + "hash_layer_count")) {
    n_hash = *v;
  } else {
    while (f.find_tensor(fmt::format("blk.{}.ffn_gate_tid2eid.weight", n_hash))) ++n_hash;
  }
  k.hash_layer.assign(static_cast<size_t>(k.n_layer), false);
  for (int64_t l = 0; l < k.n_layer && l < n_hash; ++l) k.hash_layer[static_cast<size_t>(l)] = true;
  return k;
}

bool PrunePlan::any() const {
  for (const auto& k : kept)
    if (!k.empty()) return true;
  return false;
}

int64_t PrunePlan::dropped() const {
  int64_t n = 0;
  for (const auto& k : kept)
    if (!k.empty()) n += n_expert - static_cast<int64_t>(k.size());
  return n;
}

PrunePlan make_prune_plan(const gguf::File& f, const PruneMask& mask, const std::string& what) {
  const ModelKey key = file_model_key(f);
  PrunePlan p;
  p.arch = key.architecture;
  p.n_expert = key.n_expert;
  p.method = mask.method;
  if (auto per = f.get_int_array(p.arch + ".expert_count_per_layer"))
    for (int64_t c : *per)
      if (c != key.n_expert)
        fail("{}: already pruned ({}.expert_count_per_layer); prune the unpruned file with the mask instead", f.path(),
             p.arch);
  check_mask(mask, key, what);
  p.kept.resize(static_cast<size_t>(key.n_layer));
  for (int64_t l = 0; l < key.n_layer; ++l) {
    const auto& m = mask.pruned[static_cast<size_t>(l)];
    bool any = false;
    for (uint8_t b : m) any = any || b;
    if (!any) continue;
    for (int64_t e = 0; e < key.n_expert; ++e)
      if (!m[static_cast<size_t>(e)]) p.kept[static_cast<size_t>(l)].push_back(e);
  }
  // Every tensor of a pruned layer that is indexed by expert must be one this file knows how to
  // re-index; anything else expert-shaped would silently keep the old numbering.
  for (const auto& t : f.tensors()) {
    const int64_t l = tensor_layer(t.name);
    if (l < 0 || l >= key.n_layer || p.kept[static_cast<size_t>(l)].empty()) continue;
    const std::string rest = t.name.substr(t.name.find('.', 4) + 1);
    const bool known = rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight" || rest == "ffn_down_exps.weight" ||
                       rest == "ffn_gate_inp.weight" || rest == "exp_probs_b.bias";
    if (!known && rest.find("_exps") != std::string::npos)
      fail("{}: tensor {} is per expert but not one --prune can re-index (ffn_{{gate,up,down}}_exps, ffn_gate_inp, "
           "exp_probs_b)",
           f.path(), t.name);
  }
  return p;
}

std::optional<SlicedTensor> slice_tensor(const gguf::TensorInfo& t, const PrunePlan& plan, const std::string& file) {
  const int64_t l = tensor_layer(t.name);
  if (l < 0 || l >= static_cast<int64_t>(plan.kept.size()) || plan.kept[static_cast<size_t>(l)].empty()) return {};
  const auto& kept = plan.kept[static_cast<size_t>(l)];
  const std::string rest = t.name.substr(t.name.find('.', 4) + 1);
  const uint64_t E = static_cast<uint64_t>(plan.n_expert);
  SlicedTensor s;
  s.info = t;
  s.kept_ids = kept;
  s.orig_count = plan.n_expert;
  size_t unit = 0;  // bytes per expert (matrix, row or value)
  if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight" || rest == "ffn_down_exps.weight") {
    if (t.ne.size() != 3 || t.ne[2] != E)
      fail("{}: tensor {} should be [n_in, n_out, {}] to be pruned", file, t.name, E);
    unit = t.n_bytes / E;
    s.info.ne[2] = kept.size();
    s.per_matrix = true;
  } else if (rest == "ffn_gate_inp.weight") {
    if (t.ne.size() != 2 || t.ne[1] != E) fail("{}: tensor {} should be [n_embd, {}] to be pruned", file, t.name, E);
    unit = t.n_bytes / E;
    s.info.ne[1] = kept.size();
  } else if (rest == "exp_probs_b.bias") {
    if (t.ne.size() != 1 || t.ne[0] != E) fail("{}: tensor {} should be [{}] to be pruned", file, t.name, E);
    const auto& tr = traits(t.type);
    if (tr.block_elems != 1) fail("{}: tensor {} has block type {}: cannot drop single entries", file, t.name, tr.name);
    unit = t.n_bytes / E;
    s.info.ne[0] = kept.size();
  } else {
    return {};
  }
  if (unit * E != t.n_bytes) fail("{}: tensor {}: {} bytes do not split into {} experts", file, t.name, t.n_bytes, E);
  s.bytes.resize(unit * kept.size());
  for (size_t i = 0; i < kept.size(); ++i)
    std::memcpy(s.bytes.data() + i * unit, t.data + static_cast<size_t>(kept[i]) * unit, unit);
  s.info.n_bytes = s.bytes.size();
  s.info.data = s.bytes.data();
  return s;
}

std::vector<gguf::KeyValue> prune_metadata(const PrunePlan& plan, int64_t n_layer) {
  std::vector<gguf::Value> per;
  std::vector<std::string> kept;
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto& k = plan.kept[static_cast<size_t>(l)];
    per.push_back(gguf::Value::u32(static_cast<uint32_t>(k.empty() ? plan.n_expert : static_cast<int64_t>(k.size()))));
    if (!k.empty()) kept.push_back(fmt::format("blk.{}: {}", l, fmt::join(k, " ")));
  }
  return {{plan.arch + ".expert_count_per_layer", gguf::Value::array(gguf::ValueType::U32, std::move(per))},
          {"ds4.prune.method", gguf::Value::string(plan.method)},
          {"ds4.prune.kept_experts", gguf::Value::string_array(kept)}};
}

}  // namespace ds4::quantize
