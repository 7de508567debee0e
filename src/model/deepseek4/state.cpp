#include "model/deepseek4/state.h"

#include <cmath>

namespace ds4::model::deepseek4 {

void CompressorState::reset(int64_t r, int64_t l, int64_t d) {
  ratio = r;
  lanes = l;
  dim = d;
  const size_t n = static_cast<size_t>(l * r * l * d);
  kv.assign(n, 0.0f);
  score.assign(n, -INFINITY);
  rows.clear();
}

State State::create(const HParams& hp) {
  State s;
  s.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerState& L = s.layers[static_cast<size_t>(il)];
    L.raw.assign(static_cast<size_t>(hp.sliding_window * hp.head_dim), 0.0f);
    const int64_t R = hp.ratio(il);
    if (R > 0) L.attn.reset(R, R == 4 ? 2 : 1, hp.head_dim);
    if (R == 4) L.index.reset(R, 2, hp.indexer_head_dim);
  }
  return s;
}

}  // namespace ds4::model::deepseek4
