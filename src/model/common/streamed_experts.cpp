#include "model/common/streamed_experts.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
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

// Experts the provider hands out as host views, computed by the host backend (header comment).
// Their outputs are collected on the host in hand-out order and placed into slot_out at the
// end with one upload, so the device gets one transfer per layer instead of one per slot.
class HostExperts {
 public:
  HostExperts(compute::Backend& host, const compute::Buffer<float>& x, int64_t n, int64_t d, size_t max_m)
      : host_(host), x_(x), n_(n), d_(d), max_m_(max_m) {}

  // The layer's input on the host: one download, the first time an expert needs it (or
  // before the device work is queued, when the lease says host views may come).
  void fetch_input() {
    if (!hx_.empty() || n_ == 0) return;
    hx_ = x_.to_host(static_cast<size_t>(n_ * d_));
  }

  void compute(const compute::ExpertSet& g, const compute::ExpertSet& u, const compute::ExpertSet& dn,
               const std::vector<int64_t>& slots, const std::vector<float>& w, int64_t K, float limit) {
    fetch_input();
    if (!xb_.data()) {  // the host backend's buffers, made once per layer
      xb_ = compute::Buffer<float>(host_, max_m_ * static_cast<size_t>(d_));
      wb_ = compute::Buffer<float>(host_, max_m_);
      yb_ = compute::Buffer<float>(host_, max_m_ * static_cast<size_t>(d_));
      zero_ = compute::Buffer<int32_t>(host_, max_m_);
      zero_.from_host(std::vector<int32_t>(max_m_, 0));
    }
    const int64_t m = static_cast<int64_t>(slots.size());
    const size_t row = static_cast<size_t>(d_) * sizeof(float);
    std::vector<float> wg(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t s = slots[static_cast<size_t>(i)];
      host_.upload(xb_.data() + i * d_, hx_.data() + (s / K) * d_, row);
      wg[static_cast<size_t>(i)] = w[static_cast<size_t>(s)];
    }
    wb_.from_host(wg);
    host_.moe_experts(g, u, dn, xb_.data(), zero_.data(), wb_.data(), m, 1, limit, yb_.data());
    const size_t at = out_.size();
    out_.resize(at + static_cast<size_t>(m * d_));
    host_.download(out_.data() + at, yb_.data(), static_cast<size_t>(m) * row);
    slots_.insert(slots_.end(), slots.begin(), slots.end());
  }

  // Each computed slot's output into its row of slot_out (session backend memory).
  template <class OutRow>
  void place(compute::Backend& be, OutRow out_row) {
    if (slots_.empty()) return;
    compute::Buffer<float> staged(be, out_.size());
    staged.from_host(out_);
    const size_t row = static_cast<size_t>(d_) * sizeof(float);
    for (size_t j = 0; j < slots_.size(); ++j) be.copy(out_row(slots_[j]), staged.data() + j * d_, row);
  }

 private:
  compute::Backend& host_;
  const compute::Buffer<float>& x_;
  int64_t n_, d_;
  size_t max_m_;
  std::vector<float> hx_, out_;
  std::vector<int64_t> slots_;
  compute::Buffer<float> xb_, wb_, yb_;
  compute::Buffer<int32_t> zero_;
};

}  // namespace

void streamed_moe_experts(compute::Backend& be, stream::ExpertProvider& xp, int64_t il, int64_t d, int64_t K,
                          int64_t n, float limit, const compute::Buffer<float>& x,
                          const compute::Buffer<int32_t>& experts, const compute::Buffer<float>& weights,
                          const std::vector<int32_t>& guess, compute::Buffer<float>& y, compute::Backend* host) {
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
  std::optional<HostExperts> on_host;
  if (host) on_host.emplace(*host, x, n, d, max_m);
  // Now, before device work is queued: a download later would wait for that work to finish,
  // and the host experts could not run while the device computes its own.
  if (on_host && lease.may_hand_out_host()) on_host->fetch_input();
  while (const auto* e = lease.next()) {
    const auto& slots = by_expert[static_cast<size_t>(e->id)];
    const int64_t m = static_cast<int64_t>(slots.size());
    const compute::ExpertSet g = one_expert(e->gate), u = one_expert(e->up), dn = one_expert(e->down);
    if (e->host && on_host) {
      on_host->compute(g, u, dn, slots, w, K, limit);
      continue;
    }
    if (e->host && be.device_memory())
      fail("internal: layer {} expert {} is in host memory but the {} backend computes it and no host backend was "
           "given (host compute)",
           il, e->id, be.name());
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
  if (on_host) on_host->place(be, out_row);
  be.fill(y.data(), n * d, 0.0f);
  for (int64_t k = 0; k < K; ++k) be.add(y.data(), slot_out.data() + k * n * d, n * d);
}

}  // namespace ds4::model
