// Model: load, validation and the entry point that runs Forward over a batch in chunks.
#include "model/deepseek4/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "compute/numerics.h"
#include "core/error.h"
#include "model/deepseek4/forward.h"
#include "stream/layout.h"

namespace ds4::model::deepseek4 {

Model::Model(gguf::File file, Options opt) : file_(std::move(file)), opt_(opt) {
  hp_ = HParams::from_gguf(file_);
  w_ = Weights::bind(file_, hp_);
  freqs_swa_ = compute::rope_frequencies(hp_.rope_swa);
  freqs_compressed_ = compute::rope_frequencies(hp_.rope_compressed);
}

std::unique_ptr<Model> Model::load(const std::string& path, Options opt) {
  return from_file(gguf::File::open(path), opt);
}

std::unique_ptr<Model> Model::from_file(gguf::File file, Options opt) {
  return std::unique_ptr<Model>(new Model(std::move(file), opt));
}

void Model::register_weights(compute::Backend& be) const {
  // Tensor data in address order, as ranges of adjacent tensors (the gaps between them are
  // alignment padding of the mapping): one range for a resident model, the whole data section.
  // With streamed experts, the routed-expert tensors are left out and split the ranges: the
  // expert cache serves them (a device backend would otherwise copy ~90% of a Flash file, and
  // a GGUF whose experts pack-experts freed has holes there).
  std::unordered_set<std::string> streamed;
  if (opt_.experts)
    for (int64_t il = 0; il < hp_.n_layer; ++il)
      for (int c = 0; c < 3; ++c) streamed.insert(stream::expert_tensor_name(il, c));
  std::vector<const gguf::TensorInfo*> ts;
  for (const auto& t : file_.tensors())
    if (t.data && t.n_bytes > 0) ts.push_back(&t);
  std::sort(ts.begin(), ts.end(), [](const auto* a, const auto* b) { return a->data < b->data; });
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  int n_ranges = 0;
  auto flush = [&] {
    if (lo)
      be.register_weights(lo, static_cast<size_t>(hi - lo),
                          n_ranges++ == 0 ? file_.path() : fmt::format("{} (part {})", file_.path(), n_ranges));
    lo = hi = nullptr;
  };
  for (const auto* t : ts) {
    if (streamed.count(t->name)) {
      flush();
      continue;
    }
    if (!lo) lo = t->data;
    hi = std::max(hi, t->data + t->n_bytes);
  }
  flush();
  size_t i = 0;
  for (const auto& v : w_.widened())
    be.register_weights(v.data(), v.size() * sizeof(float), fmt::format("widened vector {}", i++));
}

void Model::eval(compute::Backend& be, State& state, std::span<const int32_t> tokens, float* logits_all,
                 LayerHook* hook) const {
  if (tokens.empty()) return;
  if (state.backend != &be) fail("deepseek4: the session state belongs to another backend");
  if (state.layers.size() != static_cast<size_t>(hp_.n_layer))
    fail("deepseek4: session state has {} layers, the model {}", state.layers.size(), hp_.n_layer);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
      fail("deepseek4: token {} (index {} of the batch) is outside the vocabulary [0, {})", tokens[i], i, hp_.n_vocab);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t step = std::max<int64_t>(1, opt_.max_batch);
  for (int64_t at = 0; at < n; at += step) {
    const int64_t len = std::min(step, n - at);
    Forward(*this, be, state, tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(len)), hook)
        .run(logits_all ? logits_all + at * hp_.n_vocab : nullptr, at + len == n);
  }
}

}  // namespace ds4::model::deepseek4
