#include "model/common/streamed_experts.h"

#include <cstring>

#include "stream/provider.h"

namespace ds4::model {

namespace {

compute::ExpertSet one_expert(const stream::WeightView& v) {
  compute::ExpertSet s;
  s.first = {v.type, v.data, v.n_in, v.n_out, v.row_stride};
  s.n_expert = 1;
  s.expert_stride = v.row_stride * static_cast<size_t>(v.n_out);
  return s;
}

}  // namespace

void streamed_moe_experts(compute::Backend& be, stream::ExpertProvider& xp, int64_t il, int64_t d, int64_t K,
                          int64_t n, float limit, const compute::Buffer<float>& x,
                          const compute::Buffer<int32_t>& experts, const compute::Buffer<float>& weights,
                          const std::vector<int32_t>& guess, compute::Buffer<float>& y) {
  const std::vector<int32_t> ids = experts.to_host();
  const std::vector<float> w = weights.to_host(), xh = x.to_host();
  // Tokens per expert, in slot order (the order moe_experts gathers them in).
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(xp.layout().n_expert));
  for (int64_t s = 0; s < n * K; ++s) by_expert[static_cast<size_t>(ids[static_cast<size_t>(s)])].push_back(s);
  std::vector<float> slot_out(static_cast<size_t>(n * K * d), 0.0f), xg, wg, yh;
  stream::ExpertLease lease = xp.acquire(il, ids, K);
  if (!guess.empty()) xp.hint(il + 1, guess);  // after acquire: this layer's experts are pinned
  while (const auto* e = lease.next()) {
    const auto& slots = by_expert[static_cast<size_t>(e->id)];
    const int64_t m = static_cast<int64_t>(slots.size());
    xg.resize(static_cast<size_t>(m * d));
    wg.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(xg.data() + i * d, xh.data() + (slots[i] / K) * d, static_cast<size_t>(d) * sizeof(float));
      wg[static_cast<size_t>(i)] = w[static_cast<size_t>(slots[i])];
    }
    compute::Buffer<float> xb(be, xg.size()), wb(be, wg.size()), yb(be, xg.size());
    compute::Buffer<int32_t> zero(be, static_cast<size_t>(m));
    xb.from_host(xg);
    wb.from_host(wg);
    zero.from_host(std::vector<int32_t>(static_cast<size_t>(m), 0));
    be.moe_experts(one_expert(e->gate), one_expert(e->up), one_expert(e->down), xb.data(), zero.data(), wb.data(), m,
                   1, limit, yb.data());
    yh = yb.to_host();
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(slot_out.data() + slots[i] * d, yh.data() + i * d, static_cast<size_t>(d) * sizeof(float));
  }
  std::vector<float> yv(static_cast<size_t>(n * d), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const float* s = slot_out.data() + (t * K + k) * d;
      for (int64_t i = 0; i < d; ++i) yv[static_cast<size_t>(t * d + i)] += s[i];
    }
  y.from_host(yv);
}

}  // namespace ds4::model
