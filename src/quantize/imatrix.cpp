#include "quantize/imatrix.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ds4::quantize {

namespace {
constexpr std::string_view kSums = ".in_sum2", kCounts = ".counts";
}

std::vector<float> Imatrix::weights(const std::string& tensor, int64_t mat, int64_t ne0, int64_t n_mat) const {
  auto it = entries.find(tensor);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  // llama-imatrix stores a grouped projection (DeepSeek V4's attn_output_a: G groups of rows,
  // each multiplying its own slice of the input) as one matrix of G * ne0 columns, the slices
  // side by side, with one count per token. The columns of the weight see every slice, so the
  // importance of column j is the mean over all slices: fold them.
  if (n_mat == 1 && e.n_mat() == 1 && e.ne0 > ne0 && e.ne0 % ne0 == 0) {
    const int64_t groups = e.ne0 / ne0;
    std::vector<float> w(static_cast<size_t>(ne0), 1.0f);
    const float count = static_cast<float>(e.counts[0] * static_cast<double>(groups));
    if (count > 0)
      for (int64_t j = 0; j < ne0; ++j) {
        double s = 0;
        for (int64_t g = 0; g < groups; ++g) s += static_cast<float>(e.sums[static_cast<size_t>(g * ne0 + j)]);
        w[static_cast<size_t>(j)] = static_cast<float>(s) / count;
      }
    return w;
  }
  if (e.ne0 != ne0 || e.n_mat() != n_mat)
    fail("imatrix entry {} is [{}, {}] but the tensor has {} columns and {} matrices (an imatrix of another model?)",
         tensor, e.ne0, e.n_mat(), ne0, n_mat);
  std::vector<float> w(static_cast<size_t>(ne0), 1.0f);
  // As llama-quantize: float(sum) / float(count), computed in float from the stored floats.
  const float count = static_cast<float>(e.counts[static_cast<size_t>(mat)]);
  if (count > 0.0f)
    for (int64_t j = 0; j < ne0; ++j) w[static_cast<size_t>(j)] = static_cast<float>(e.sums[static_cast<size_t>(mat * ne0 + j)]) / count;
  return w;
}

void Imatrix::merge(const Imatrix& o) {
  for (const auto& [name, e] : o.entries) {
    auto [it, fresh] = entries.try_emplace(name, e);
    if (fresh) continue;
    ImatrixEntry& d = it->second;
    if (d.ne0 != e.ne0 || d.n_mat() != e.n_mat())
      fail("imatrix merge: {} is [{}, {}] here and [{}, {}] there", name, d.ne0, d.n_mat(), e.ne0, e.n_mat());
    for (size_t i = 0; i < d.sums.size(); ++i) d.sums[i] += e.sums[i];
    for (size_t i = 0; i < d.counts.size(); ++i) d.counts[i] += e.counts[i];
  }
  datasets.insert(datasets.end(), o.datasets.begin(), o.datasets.end());
  chunk_count += o.chunk_count;
}

void write_imatrix(const std::string& path, const Imatrix& m) {
  gguf::Writer w(path);
  w.add_kv("general.type", gguf::Value::string("imatrix"));
  w.add_kv("imatrix.datasets", gguf::Value::string_array(m.datasets));
  w.add_kv("imatrix.chunk_count", gguf::Value::u32(m.chunk_count));
  w.add_kv("imatrix.chunk_size", gguf::Value::u32(m.chunk_size));
  for (const auto& [name, e] : m.entries) {
    if (name.size() + kSums.size() > gguf::Limits::max_tensor_name)
      fail("{}: tensor name {}{} is longer than {} characters", path, name, kSums, gguf::Limits::max_tensor_name);
    // Trailing dimensions of 1 are dropped, as ggml's GGUF writer does: [ne0] and [1] for a
    // 2-D weight, [ne0, n_mat] and [1, n_mat] for routed experts.
    const uint64_t nm = static_cast<uint64_t>(e.n_mat());
    w.add_tensor(name + std::string(kSums), GgmlType::F32,
                 nm == 1 ? std::vector<uint64_t>{static_cast<uint64_t>(e.ne0)} : std::vector<uint64_t>{static_cast<uint64_t>(e.ne0), nm});
    w.add_tensor(name + std::string(kCounts), GgmlType::F32, nm == 1 ? std::vector<uint64_t>{1} : std::vector<uint64_t>{1, nm});
  }
  w.write_header();
  for (const auto& [name, e] : m.entries) {
    std::vector<float> s(e.sums.begin(), e.sums.end()), c(e.counts.begin(), e.counts.end());
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(s.data()), s.size() * 4});
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(c.data()), c.size() * 4});
  }
  w.finish();
}

Imatrix read_imatrix(const std::string& path) {
  gguf::File f = gguf::File::open(path);
  const auto type = f.get_string("general.type");
  if (type != "imatrix")
    fail("{}: not an imatrix file (general.type is {})", path, type ? "'" + *type + "'" : std::string("missing"));
  Imatrix m;
  auto ds = f.get_string_array("imatrix.datasets");
  auto cc = f.get_uint("imatrix.chunk_count");
  auto cs = f.get_uint("imatrix.chunk_size");
  if (!ds || !cc || !cs)
    fail("{}: missing imatrix metadata (imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size are required)", path);
  m.datasets = *ds;
  m.chunk_count = static_cast<uint32_t>(*cc);
  m.chunk_size = static_cast<uint32_t>(*cs);
  for (const auto& t : f.tensors()) {
    std::string_view n = t.name;
    if (!n.ends_with(kSums)) {
      if (n.ends_with(kCounts)) {
        const std::string base(n.substr(0, n.size() - kCounts.size()));
        if (!f.find_tensor(base + std::string(kSums))) fail("{}: tensor {} has no {}{}", path, t.name, base, kSums);
        continue;
      }
      fail("{}: unexpected tensor {} (an imatrix holds only <name>.in_sum2 and <name>.counts)", path, t.name);
    }
    const std::string base(n.substr(0, n.size() - kSums.size()));
    const gguf::TensorInfo* c = f.find_tensor(base + std::string(kCounts));
    if (!c) fail("{}: tensor {} has no {}{}", path, t.name, base, kCounts);
    if (t.type != GgmlType::F32 || c->type != GgmlType::F32) fail("{}: {} and its counts must be f32", path, t.name);
    if (t.ne.size() > 2 || c->ne.size() > 2) fail("{}: {} has more than 2 dimensions", path, t.name);
    const uint64_t ne0 = t.ne[0], nmat = t.ne.size() > 1 ? t.ne[1] : 1;
    const uint64_t cn = c->n_elements();
    if (c->ne[0] != 1 || cn != nmat)
      fail("{}: {} is [{}, {}] but {} has {} counts (expected [1, {}])", path, t.name, ne0, nmat, c->name, cn, nmat);
    ImatrixEntry e;
    e.ne0 = static_cast<int64_t>(ne0);
    e.sums.resize(ne0 * nmat);
    e.counts.resize(nmat);
    for (uint64_t i = 0; i < ne0 * nmat; ++i) {
      float v;
      std::memcpy(&v, t.data + 4 * i, 4);
      if (!std::isfinite(v) || v < 0)
        fail("{}: {} element {} is {} (sums of squares are finite and >= 0)", path, t.name, i, v);
      e.sums[i] = v;
    }
    for (uint64_t i = 0; i < nmat; ++i) {
      float v;
      std::memcpy(&v, c->data + 4 * i, 4);
      if (!std::isfinite(v) || v < 0) fail("{}: {} element {} is {} (counts are finite and >= 0)", path, c->name, i, v);
      e.counts[i] = v;
    }
    m.entries.emplace(base, std::move(e));
  }
  if (m.entries.empty()) fail("{}: the imatrix has no entries", path);
  return m;
}

}  // namespace ds4::quantize
