#include "model/qwen35moe/state.h"

#include "core/error.h"

namespace ds4::model::qwen35moe {

State State::create(const HParams& hp, compute::Backend& be, int64_t n_ctx) {
  if (n_ctx < 1) fail("qwen35moe: state for a context of {} positions", n_ctx);
  State s;
  s.backend = &be;
  s.n_ctx = n_ctx;
  s.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerState& L = s.layers[static_cast<size_t>(il)];
    if (hp.is_recurrent(il)) {
      L.conv = compute::Buffer<float>(be, static_cast<size_t>(std::max<int64_t>(1, (hp.conv_kernel - 1) * hp.conv_channels())));
      L.ssm = compute::Buffer<float>(be, static_cast<size_t>(hp.ssm_n_v * hp.ssm_dv * hp.ssm_dk));
      be.fill(L.conv.data(), static_cast<int64_t>(L.conv.size()), 0.0f);
      be.fill(L.ssm.data(), static_cast<int64_t>(L.ssm.size()), 0.0f);
    } else {
      const size_t n = static_cast<size_t>(n_ctx * hp.n_head_kv * hp.head_dim);
      L.k = compute::Buffer<float>(be, n);
      L.v = compute::Buffer<float>(be, n);
    }
  }
  return s;
}

uint64_t State::recurrent_floats(const HParams& hp) {
  const uint64_t per = static_cast<uint64_t>(std::max<int64_t>(1, (hp.conv_kernel - 1) * hp.conv_channels()) +
                                             hp.ssm_n_v * hp.ssm_dv * hp.ssm_dk);
  return per * static_cast<uint64_t>(hp.n_recurrent());
}

}  // namespace ds4::model::qwen35moe
