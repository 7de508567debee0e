#include "model/common/streamed_experts.h"

#include <algorithm>

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
  // The routing comes to the host (the layer's one synchronization: the provider must know the
  // experts); activations, weights and outputs stay in backend memory.
  const std::vector<int32_t> ids = experts.to_host();
  const std::vector<float> w = weights.to_host();
  // Slots per expert, in slot order (the order moe_experts gathers them in).
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(xp.layout().n_expert));
  size_t max_m = 0;
  for (int64_t s = 0; s < n * K; ++s) {
    auto& v = by_expert[static_cast<size_t>(ids[static_cast<size_t>(s)])];
    v.push_back(s);
    max_m = std::max(max_m, v.size());
  }
  const size_t row = static_cast<size_t>(d) * sizeof(float);
  // Each slot's output, slot-major: slot (t, k) at row k*n + t, so adding the K blocks of n
  // rows in k order sums every token's slots in slot order, as moe_experts does.
  compute::Buffer<float> slot_out(be, static_cast<size_t>(n * K * d));
  compute::Buffer<int32_t> zero(be, max_m);  // expert 0 of a one-expert set, for every row
  zero.from_host(std::vector<int32_t>(max_m, 0));
  compute::Buffer<float> xb, wb, yb;  // gathered rows of experts with several tokens (prefill)
  if (max_m > 1) {
    xb = compute::Buffer<float>(be, max_m * static_cast<size_t>(d));
    wb = compute::Buffer<float>(be, max_m);
    yb = compute::Buffer<float>(be, max_m * static_cast<size_t>(d));
  }
  auto out_row = [&](int64_t s) { return slot_out.data() + ((s % K) * n + s / K) * d; };
  std::vector<float> wg;
  stream::ExpertLease lease = xp.acquire(il, ids, K);
  if (!guess.empty()) xp.hint(il + 1, guess);  // after acquire: this layer's experts are pinned
  while (const auto* e = lease.next()) {
    const auto& slots = by_expert[static_cast<size_t>(e->id)];
    const int64_t m = static_cast<int64_t>(slots.size());
    const compute::ExpertSet g = one_expert(e->gate), u = one_expert(e->up), dn = one_expert(e->down);
    if (m == 1) {  // decode: the token's row, weight and output slot in place
      const int64_t s = slots[0];
      be.moe_experts(g, u, dn, x.data() + (s / K) * d, zero.data(), weights.data() + s, 1, 1, limit, out_row(s));
      continue;
    }
    wg.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      be.copy(xb.data() + i * d, x.data() + (slots[i] / K) * d, row);
      wg[static_cast<size_t>(i)] = w[static_cast<size_t>(slots[i])];
    }
    wb.from_host(wg);
    be.moe_experts(g, u, dn, xb.data(), zero.data(), wb.data(), m, 1, limit, yb.data());
    for (int64_t i = 0; i < m; ++i) be.copy(out_row(slots[i]), yb.data() + i * d, row);
  }
  be.fill(y.data(), n * d, 0.0f);
  for (int64_t k = 0; k < K; ++k) be.add(y.data(), slot_out.data() + k * n * d, n * d);
}

}  // namespace ds4::model
