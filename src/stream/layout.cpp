#include "stream/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::stream {

std::string expert_tensor_name(int64_t layer, int c) {
  return fmt::format("blk.{}.{}.weight", layer, kComponentName[c]);
}

int64_t experts_used_per_token(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture").value_or("deepseek4");
  return static_cast<int64_t>(f.get_uint(arch + ".expert_used_count").value_or(0));
}

uint64_t ExpertLayout::total_bytes() const {
  uint64_t s = 0;
  for (const auto& l : layers) s += l.expert_bytes() * static_cast<uint64_t>(n_expert);
  return s;
}

uint64_t ExpertLayout::max_expert_bytes() const {
  uint64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.expert_bytes());
  return m;
}

ExpertLayout ExpertLayout::from_gguf(const gguf::File& f) {
  ExpertLayout out;
  for (int64_t il = 0;; ++il) {
    const gguf::TensorInfo* t[3];
    int found = 0;
    for (int c = 0; c < 3; ++c) {
      t[c] = f.find_tensor(expert_tensor_name(il, c));
      found += t[c] != nullptr;
    }
    if (found == 0) break;
    if (found != 3)
      for (int c = 0; c < 3; ++c)
        if (!t[c]) fail("{}: layer {} has routed-expert tensors but not {}", f.path(), il, expert_tensor_name(il, c));
    LayerShape ls;
    ls.layer = il;
    std::array<uint64_t, 3> off{};
    for (int c = 0; c < 3; ++c) {
      const gguf::TensorInfo& ti = *t[c];
      if (ti.ne.size() != 3)
        fail("{}: tensor {} has {} dimensions, expected 3 ([n_in, n_out, n_expert])", f.path(), ti.name, ti.ne.size());
      const auto& tr = traits(ti.type);
      if (ti.type == GgmlType::I32 || ti.type == GgmlType::Q8_K)
        fail("{}: tensor {} has type {}, not a weight type", f.path(), ti.name, tr.name);
      if (ti.ne[0] % tr.block_elems != 0)
        fail("{}: tensor {}: row length {} is not a multiple of the {} block size {}", f.path(), ti.name, ti.ne[0],
             tr.name, tr.block_elems);
      const int64_t ne2 = static_cast<int64_t>(ti.ne[2]);
      if (out.n_expert == 0) out.n_expert = ne2;
      if (ne2 != out.n_expert)
        fail("{}: tensor {} has {} experts, layer 0 has {}{}", f.path(), ti.name, ne2, out.n_expert,
             f.find("deepseek4.expert_count_per_layer") ? " (experts pruned per layer by ds4-gguf quantize --prune: "
                                                             "such a file cannot be streamed or packed)"
                                                           : "");
      ComponentShape& cs = ls.comp[static_cast<size_t>(c)];
      cs.type = ti.type;
      cs.n_in = static_cast<int64_t>(ti.ne[0]);
      cs.n_out = static_cast<int64_t>(ti.ne[1]);
      cs.row_stride = row_bytes(tr, ti.ne[0]);
      cs.bytes = cs.row_stride * ti.ne[1];
      if (cs.bytes * ti.ne[2] != ti.n_bytes)
        fail("{}: tensor {}: {} bytes, expected {} experts x {}", f.path(), ti.name, ti.n_bytes, ne2, cs.bytes);
      off[static_cast<size_t>(c)] = ti.file_offset;
    }
    const auto &g = ls.comp[0], &u = ls.comp[1], &d = ls.comp[2];
    if (g.n_in != u.n_in || g.n_out != u.n_out || d.n_in != g.n_out || d.n_out != g.n_in)
      fail("{}: layer {}: expert shapes gate [{}, {}], up [{}, {}], down [{}, {}] do not chain", f.path(), il, g.n_in,
           g.n_out, u.n_in, u.n_out, d.n_in, d.n_out);
    out.layers.push_back(ls);
    out.gguf_offset.push_back(off);
  }
  out.n_layer = static_cast<int64_t>(out.layers.size());
  if (out.n_layer == 0) fail("{}: no routed-expert tensors (blk.0.ffn_gate_exps.weight)", f.path());
  return out;
}

bool experts_pruned_per_layer(const gguf::File& f) {
  const auto per = f.get_int_array("deepseek4.expert_count_per_layer");
  return per && std::adjacent_find(per->begin(), per->end(), std::not_equal_to<>()) != per->end();
}

}  // namespace ds4::stream
