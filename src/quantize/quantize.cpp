#include "quantize/quantize.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "quantize/prune_tensors.h"

namespace ds4::quantize {

namespace {

constexpr const char* kHashKey = "ds4.quantize.hashes";
constexpr const char* kHashVersion = "ds4-quantize-1";

bool is_matrix(const gguf::TensorInfo& t) {
  if (t.ne.size() < 2) return false;
  return t.type != GgmlType::I32;
}

int64_t layer_count(const gguf::File& f) {
  if (auto arch = f.get_string("general.architecture"))
    if (auto n = f.get_uint(*arch + ".block_count")) return static_cast<int64_t>(*n);
  int64_t n = 0;
  for (const auto& t : f.tensors()) n = std::max(n, tensor_layer(t.name) + 1);
  return n;
}

struct Planned {
  const gguf::TensorInfo* src = nullptr;  // the file's tensor, or sliced->info
  GgmlType to = GgmlType::F32;
  std::string note;
  std::shared_ptr<const SlicedTensor> sliced;  // --prune: this tensor without the pruned experts
  const gguf::TensorInfo* orig = nullptr;       // the file's tensor
};

std::vector<Planned> make_plan(const gguf::File& f, const Recipe& r, std::vector<std::string>* notes,
                               const PrunePlan* prune = nullptr) {
  const int64_t n_layers = layer_count(f);
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  for (auto& w : check_recipe(r, names, n_layers))
    if (notes) notes->push_back(std::move(w));
  std::vector<Planned> out;
  for (const auto& ft : f.tensors()) {
    Planned p{&ft, ft.type, "", nullptr, &ft};
    if (prune)
      if (auto s = slice_tensor(ft, *prune, f.path())) {
        p.sliced = std::make_shared<const SlicedTensor>(std::move(*s));
        p.src = &p.sliced->info;
      }
    const gguf::TensorInfo& t = *p.src;
    if (!is_matrix(t)) {
      out.push_back(p);
      continue;
    }
    const int i = match_rule(r, t.name, n_layers);
    if (i >= 0 && r.rules[static_cast<size_t>(i)].type) {
      const auto& rule = r.rules[static_cast<size_t>(i)];
      p.to = *rule.type;
      if (t.ne.size() > 3) fail("{}: tensor {} has {} dimensions (at most 3 can be re-quantized)", f.path(), t.name, t.ne.size());
      const auto& tr = traits(p.to);
      if (p.to != t.type && t.ne[0] % tr.block_elems != 0) {
        if (t.ne.size() == 3)
          fail("recipe {} line {}: tensor {} needs {} rows, a multiple of {} values, but ne0 = {}", r.name, rule.line,
               t.name, tr.name, tr.block_elems, t.ne[0]);
        p.note = fmt::format("{} needs ne0 % {} == 0, ne0 = {}: stored as f16", tr.name, tr.block_elems, t.ne[0]);
        p.to = GgmlType::F16;
        if (notes) notes->push_back(t.name + ": " + p.note);
      }
    }
    out.push_back(p);
  }
  return out;
}

// Types whose ggml quantizer searches with importance weights when given some (and otherwise
// rounds with its reference code): the block types other than Q8_0.
bool takes_weights(GgmlType t) {
  return t != GgmlType::Q8_0 && t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

// Importance weights of every matrix of a tensor, or empty (none needed / none in the file).
std::vector<std::vector<float>> tensor_weights(const Planned& p, const QuantizeOptions& o, bool* from_imatrix) {
  *from_imatrix = false;
  const auto& t = *p.src;
  if (p.to == t.type || !is_matrix(t)) return {};
  const int64_t ne0 = static_cast<int64_t>(t.ne[0]), nmat = t.ne.size() == 3 ? static_cast<int64_t>(t.ne[2]) : 1;
  std::vector<std::vector<float>> w;
  if (o.imatrix && o.imatrix->entries.count(t.name)) {
    // A pruned expert tensor: matrix m is original expert kept_ids[m], whose slice it gets.
    const SlicedTensor* s = p.sliced && p.sliced->per_matrix ? p.sliced.get() : nullptr;
    for (int64_t m = 0; m < nmat; ++m)
      w.push_back(s ? o.imatrix->weights(t.name, s->kept_ids[static_cast<size_t>(m)], ne0, s->orig_count)
                    : o.imatrix->weights(t.name, m, ne0, nmat));
    *from_imatrix = true;
  } else if (p.to == GgmlType::IQ2_XXS || (o.uniform_weights && takes_weights(p.to))) {
    w.assign(static_cast<size_t>(nmat), std::vector<float>(static_cast<size_t>(ne0), 1.0f));
  }
  return w;
}

uint64_t tensor_hash(const Planned& p, const std::vector<std::vector<float>>& w) {
  XXH64_state_t* s = XXH64_createState();
  XXH64_reset(s, 0);
  XXH64_update(s, kHashVersion, std::strlen(kHashVersion));
  const uint32_t from = static_cast<uint32_t>(p.src->type), to = static_cast<uint32_t>(p.to);
  XXH64_update(s, &from, 4);
  XXH64_update(s, &to, 4);
  for (uint64_t d : p.src->ne) XXH64_update(s, &d, 8);
  XXH64_update(s, p.src->data, p.src->n_bytes);
  const uint64_t nw = w.size();
  XXH64_update(s, &nw, 8);
  for (const auto& v : w) XXH64_update(s, v.data(), v.size() * sizeof(float));
  const uint64_t h = XXH64_digest(s);
  XXH64_freeState(s);
  return h;
}

std::vector<uint8_t> encode(const Planned& p, const std::vector<std::vector<float>>& w, ThreadPool& pool) {
  const auto& t = *p.src;
  const int64_t ne0 = static_cast<int64_t>(t.ne[0]);
  const int64_t nmat = t.ne.size() == 3 ? static_cast<int64_t>(t.ne[2]) : 1;
  const int64_t rows = static_cast<int64_t>(t.ne[1]);
  const auto& st = traits(t.type);
  const size_t src_rb = row_bytes(st, static_cast<uint64_t>(ne0));
  const size_t dst_rb = row_bytes(traits(p.to), static_cast<uint64_t>(ne0));
  std::vector<uint8_t> out(dst_rb * static_cast<size_t>(rows * nmat));
  std::vector<float> f32(static_cast<size_t>(rows * ne0));
  for (int64_t m = 0; m < nmat; ++m) {
    const uint8_t* src = t.data + static_cast<size_t>(m * rows) * src_rb;
    uint8_t* dst = out.data() + static_cast<size_t>(m * rows) * dst_rb;
    const float* imx = w.empty() ? nullptr : w[static_cast<size_t>(m)].data();
    pool.parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        quant::dequantize_row(t.type, src + static_cast<size_t>(r) * src_rb, f32.data() + r * ne0, ne0);
      quant::quantize_rows(p.to, f32.data() + r0 * ne0, dst + static_cast<size_t>(r0) * dst_rb, r1 - r0, ne0, imx);
    });
  }
  return out;
}

}  // namespace

std::vector<PlanLine> plan_quantize(const std::string& in_path, const Recipe& recipe, std::vector<std::string>* notes) {
  gguf::File f = gguf::File::open(in_path);
  std::vector<PlanLine> out;
  for (const auto& p : make_plan(f, recipe, notes)) out.push_back({p.src->name, p.src->type, p.to, p.note});
  return out;
}

QuantizeReport quantize_file(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  QuantizeReport rep;
  gguf::File f = gguf::File::open(in_path);
  std::optional<PrunePlan> prune;
  if (o.prune) {
    prune = make_prune_plan(f, *o.prune, o.prune_path.empty() ? std::string("--prune mask") : o.prune_path);
    rep.pruned_experts = prune->dropped();
  }
  const std::vector<Planned> plan = make_plan(f, o.recipe, &rep.notes, prune ? &*prune : nullptr);
  ThreadPool pool(o.threads);

  // Hashes first: they go into the header, which precedes the data.
  std::vector<std::vector<std::vector<float>>> weights(plan.size());
  std::vector<uint64_t> hashes(plan.size());
  std::vector<bool> used_imatrix(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    bool from = false;
    weights[i] = tensor_weights(plan[i], o, &from);
    used_imatrix[i] = from;
    hashes[i] = tensor_hash(plan[i], weights[i]);
  }

  // Old file for --reuse: its recorded hashes, by tensor name.
  std::optional<gguf::File> old;
  std::map<std::string, uint64_t> old_hashes;
  if (!o.reuse_path.empty()) {
    old.emplace(gguf::File::open(o.reuse_path));
    auto arr = old->get_string_array(kHashKey);
    if (!arr) fail("{}: no {} metadata (not written by ds4-gguf quantize), nothing can be reused", o.reuse_path, kHashKey);
    for (const auto& s : *arr) {
      const size_t eq = s.rfind('=');
      if (eq == std::string::npos || s.size() - eq - 1 != 16) fail("{}: malformed {} entry '{}'", o.reuse_path, kHashKey, s);
      old_hashes[s.substr(0, eq)] = std::stoull(s.substr(eq + 1), nullptr, 16);
    }
  }

  gguf::Writer w(out_path);
  std::vector<gguf::KeyValue> prune_kv;
  if (prune) prune_kv = prune_metadata(*prune, static_cast<int64_t>(prune->kept.size()));
  for (const auto& kv : f.metadata()) {
    if (kv.key.starts_with("ds4.quantize.") || kv.key.starts_with("quantize.imatrix.")) continue;
    bool replaced = false;
    for (const auto& p : prune_kv) replaced = replaced || p.key == kv.key;
    if (!replaced) w.add_kv(kv.key, kv.value);
  }
  for (const auto& p : prune_kv) w.add_kv(p.key, p.value);
  w.add_kv("ds4.quantize.recipe", gguf::Value::string(o.recipe.name));
  if (o.imatrix) {
    // llama-quantize's keys, so other tools see that an imatrix was used.
    w.add_kv("quantize.imatrix.file", gguf::Value::string(o.imatrix_path));
    w.add_kv("quantize.imatrix.entries_count", gguf::Value::i32(static_cast<int32_t>(o.imatrix->entries.size())));
    w.add_kv("quantize.imatrix.chunks_count", gguf::Value::i32(static_cast<int32_t>(o.imatrix->chunk_count)));
    if (!o.imatrix->datasets.empty())
      w.add_kv("quantize.imatrix.dataset", gguf::Value::string(o.imatrix->datasets.back()));
  }
  std::vector<std::string> hash_strings;
  for (size_t i = 0; i < plan.size(); ++i) hash_strings.push_back(fmt::format("{}={:016x}", plan[i].src->name, hashes[i]));
  w.add_kv(kHashKey, gguf::Value::string_array(hash_strings));
  for (const auto& p : plan) w.add_tensor(p.src->name, p.to, p.src->ne);
  w.write_header();

  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    const auto& t = *p.src;
    rep.in_bytes += p.orig->n_bytes;
    std::string what;
    const uint64_t out_before = rep.out_bytes;
    const gguf::TensorInfo* ot = nullptr;
    if (old) {
      auto it = old_hashes.find(t.name);
      const gguf::TensorInfo* cand = old->find_tensor(t.name);
      if (it != old_hashes.end() && it->second == hashes[i] && cand && cand->type == p.to && cand->ne == t.ne) ot = cand;
    }
    if (ot) {
      w.write_tensor_data({ot->data, ot->n_bytes});
      rep.out_bytes += ot->n_bytes;
      ++rep.reused;
      what = "reused";
    } else if (p.to == t.type) {
      w.write_tensor_data({t.data, t.n_bytes});
      rep.out_bytes += t.n_bytes;
      ++rep.copied;
      what = "copied";
    } else {
      std::vector<uint8_t> bytes;
      try {
        bytes = encode(p, weights[i], pool);
      } catch (const Error& e) {
        fail("{}: tensor {} ({} -> {}): {}", in_path, t.name, traits(t.type).name, traits(p.to).name, e.what());
      }
      w.write_tensor_data(bytes);
      rep.out_bytes += bytes.size();
      ++rep.quantized;
      if (used_imatrix[i]) ++rep.with_imatrix;
      what = fmt::format("{} -> {}{}", traits(t.type).name, traits(p.to).name, used_imatrix[i] ? " (imatrix)" : "");
    }
    if (p.sliced) {  // bytes per kept expert (matrix, router row or bias) times the dropped ones
      const uint64_t kept = p.sliced->kept_ids.size(), n = rep.out_bytes - out_before;
      rep.pruned_bytes += n / kept * (static_cast<uint64_t>(p.sliced->orig_count) - kept);
    }
    ++rep.tensors;
    if (o.progress)
      o.progress(i + 1, plan.size(), t.name, what, rep.out_bytes,
                 std::chrono::duration<double>(clock::now() - t0).count());
  }
  w.finish();
  rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return rep;
}

}  // namespace ds4::quantize
