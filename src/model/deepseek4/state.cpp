#include "model/deepseek4/state.h"

#include <atomic>
#include <cmath>

#include "core/error.h"

namespace ds4::model::deepseek4 {

void CompressorState::reset(compute::Backend& be, int64_t r, int64_t l, int64_t d, int64_t cap) {
  ratio = r;
  lanes = l;
  dim = d;
  capacity = cap;
  n_rows = 0;
  kv = compute::Buffer<float>(be, slot_floats());
  score = compute::Buffer<float>(be, slot_floats());
  rows = compute::Buffer<float>(be, static_cast<size_t>(std::max<int64_t>(cap, 1) * d));
  clear_slots();
}

void CompressorState::clear_slots() {
  kv.backend()->fill(kv.data(), static_cast<int64_t>(kv.size()), 0.0f);
  score.backend()->fill(score.data(), static_cast<int64_t>(score.size()), -INFINITY);
}

State State::create(const HParams& hp, compute::Backend& be, int64_t n_ctx) {
  if (n_ctx < 1) fail("deepseek4: state for a context of {} positions", n_ctx);
  static std::atomic<uint64_t> next_serial{1};
  State s;
  s.serial = next_serial.fetch_add(1);
  s.backend = &be;
  s.n_ctx = n_ctx;
  s.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerState& L = s.layers[static_cast<size_t>(il)];
    L.raw = compute::Buffer<float>(be, static_cast<size_t>(hp.sliding_window * hp.head_dim));
    be.fill(L.raw.data(), static_cast<int64_t>(L.raw.size()), 0.0f);
    const int64_t R = hp.ratio(il);
    if (R > 0) L.attn.reset(be, R, R == 4 ? 2 : 1, hp.head_dim, n_ctx / R);
    if (R == 4) L.index.reset(be, R, 2, hp.indexer_head_dim, n_ctx / R);
  }
  return s;
}

}  // namespace ds4::model::deepseek4
