#include "compute/analysis_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ds4::compute {

AnalysisBackend::AnalysisBackend(Backend& inner, std::shared_ptr<AnalysisStats> stats,
                                 std::shared_ptr<const AnalysisConfig> cfg)
    : inner_(inner), stats_(std::move(stats)), cfg_(std::move(cfg)) {
  const auto& ws = cfg_->weights;
  order_.resize(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) order_[i] = i;
  std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return ws[a].data < ws[b].data; });
  {
    std::lock_guard<std::mutex> lk(stats_->mu);
    if (stats_->entries.empty()) {
      for (const auto& w : ws) {
        AnalysisStats::Entry e;
        e.n_in = w.n_in, e.n_mat = w.n_mat;
        stats_->names.push_back(w.name);
        stats_->entries.push_back(std::move(e));  // sums allocated on first use
      }
      stats_->n_layer = cfg_->n_layer, stats_->n_expert = cfg_->n_expert;
      stats_->count.assign(static_cast<size_t>(cfg_->n_layer), std::vector<uint64_t>(static_cast<size_t>(cfg_->n_expert), 0));
      stats_->weight.assign(static_cast<size_t>(cfg_->n_layer), std::vector<double>(static_cast<size_t>(cfg_->n_expert), 0));
    } else if (stats_->entries.size() != ws.size()) {
      fail("analysis: statistics of another model");
    }
  }
  route_bias_.resize(cfg_->pruned.size());
  for (size_t l = 0; l < cfg_->pruned.size(); ++l) {
    const auto& m = cfg_->pruned[l];
    if (m.empty()) continue;
    if (static_cast<int64_t>(m.size()) != cfg_->n_expert) fail("analysis: prune mask of layer {} has {} experts", l, m.size());
    auto& b = route_bias_[l];
    b.assign(m.size(), 0.0f);
    const float* own = l < cfg_->layer_bias.size() && cfg_->layer_bias[l].size() == m.size() ? cfg_->layer_bias[l].data() : nullptr;
    for (size_t e = 0; e < m.size(); ++e) b[e] = m[e] ? -std::numeric_limits<float>::infinity() : (own ? own[e] : 0.0f);
    inner_.register_weights(b.data(), b.size() * sizeof(float), "prune mask bias");
  }
}

AnalysisBackend::~AnalysisBackend() = default;

int AnalysisBackend::find_weight(const uint8_t* p) const {
  const auto& ws = cfg_->weights;
  auto it = std::upper_bound(order_.begin(), order_.end(), p, [&](const uint8_t* v, size_t i) { return v < ws[i].data; });
  if (it == order_.begin()) return -1;
  const size_t i = *(it - 1);
  if (p >= ws[i].data + ws[i].bytes) return -1;
  return static_cast<int>(i);
}

// Adds rows of `groups` slices of n_in values (slice g of row r at host_rows + r*stride + g*n_in)
// to matrix `mat` of weight wi.
void AnalysisBackend::observe_rows(int wi, int64_t mat, const float* xr, int64_t rows, int64_t stride, int64_t groups) {
  std::lock_guard<std::mutex> lk(stats_->mu);
  auto& e = stats_->entries[static_cast<size_t>(wi)];
  if (e.sums.empty()) {
    e.sums.assign(static_cast<size_t>(e.n_in * e.n_mat), 0.0);
    e.counts.assign(static_cast<size_t>(e.n_mat), 0.0);
  }
  double* acc = e.sums.data() + mat * e.n_in;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = xr + r * stride + g * e.n_in;
      for (int64_t j = 0; j < e.n_in; ++j) acc[j] += static_cast<double>(x[j]) * x[j];
    }
  e.counts[static_cast<size_t>(mat)] += static_cast<double>(rows * groups);
}

void AnalysisBackend::matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride,
                             int64_t y_stride) {
  inner_.matmul(w, x, rows, y, x_stride, y_stride);
  const int wi = find_weight(w.data);
  if (wi < 0) return;
  const auto& kw = cfg_->weights[static_cast<size_t>(wi)];
  if (kw.router_layer >= 0) last_router_out_ = y, last_router_layer_ = kw.router_layer;
  if (!cfg_->imatrix || rows <= 0 || w.n_in != kw.n_in) return;
  const int64_t xs = x_stride ? x_stride : w.n_in;
  host_.resize(static_cast<size_t>((rows - 1) * xs + w.n_in));
  inner_.download(host_.data(), x, host_.size() * sizeof(float));
  const int64_t mat = kw.n_mat > 1 ? static_cast<int64_t>((w.data - kw.data) / (kw.bytes / kw.n_mat)) : 0;
  if (kw.rms_normalized_input)
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = host_.data() + r * xs;
      double ss = 0;
      for (int64_t j = 0; j < w.n_in; ++j) ss += static_cast<double>(xr[j]) * xr[j];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(w.n_in) + kw.rms_eps));
      for (int64_t j = 0; j < w.n_in; ++j) xr[j] *= inv;
    }
  observe_rows(wi, mat, host_.data(), rows, xs, 1);
}

void AnalysisBackend::matmul_grouped(const Matrix& w, int64_t groups, const float* x, int64_t rows, float* y,
                                     int64_t x_stride, int64_t y_stride) {
  inner_.matmul_grouped(w, groups, x, rows, y, x_stride, y_stride);
  const int wi = find_weight(w.data);
  if (wi < 0 || !cfg_->imatrix || rows <= 0) return;
  const auto& kw = cfg_->weights[static_cast<size_t>(wi)];
  if (w.n_in != kw.n_in || kw.n_mat != 1) return;
  const int64_t xs = x_stride ? x_stride : groups * w.n_in;
  host_.resize(static_cast<size_t>((rows - 1) * xs + groups * w.n_in));
  inner_.download(host_.data(), x, host_.size() * sizeof(float));
  observe_rows(wi, 0, host_.data(), rows, xs, groups);
}

void AnalysisBackend::moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p,
                                int32_t* experts, float* weights) {
  const int layer = logits == last_router_out_ ? last_router_layer_ : -1;
  RouteParams q = p;
  if (layer >= 0 && static_cast<size_t>(layer) < route_bias_.size() && !route_bias_[static_cast<size_t>(layer)].empty()) {
    if (p.tid2eid) fail("prune mask: layer {} is hash-routed; its experts cannot be pruned", layer);
    q.bias = route_bias_[static_cast<size_t>(layer)].data();
  }
  inner_.moe_route(logits, tokens, rows, q, experts, weights);
  if (!cfg_->profile || rows <= 0) return;
  if (layer < 0 || layer >= cfg_->n_layer || p.n_expert != cfg_->n_expert)
    fail("expert profile: a moe_route call whose router matmul was not seen (layer unknown)");
  std::vector<int32_t> ids(static_cast<size_t>(rows * p.k));
  std::vector<float> wt(ids.size());
  inner_.download(ids.data(), experts, ids.size() * sizeof(int32_t));
  inner_.download(wt.data(), weights, wt.size() * sizeof(float));
  std::lock_guard<std::mutex> lk(stats_->mu);
  auto& c = stats_->count[static_cast<size_t>(layer)];
  auto& m = stats_->weight[static_cast<size_t>(layer)];
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t e = ids[i];
    if (e < 0 || e >= cfg_->n_expert) fail("expert profile: expert id {} out of range at layer {}", e, layer);
    c[static_cast<size_t>(e)] += 1;
    m[static_cast<size_t>(e)] += wt[i];
  }
}

void AnalysisBackend::embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) {
  inner_.embed(table, tokens, rows, copies, X);
  std::lock_guard<std::mutex> lk(stats_->mu);
  stats_->tokens += static_cast<uint64_t>(std::max<int64_t>(rows, 0));
}

void AnalysisBackend::moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                                  const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                                  float* y) {
  inner_.moe_experts(gate, up, down, x, experts, weights, rows, k, limit, y);
  if (!cfg_->imatrix || rows <= 0) return;
  const int gi = find_weight(gate.first.data), ui = find_weight(up.first.data), di = find_weight(down.first.data);
  if (gi < 0 || ui < 0 || di < 0)
    fail("imatrix: routed experts outside the model's weights (streamed experts cannot be observed)");
  const int64_t d = gate.first.n_in, ff = gate.first.n_out, E = gate.n_expert;
  std::vector<float> xh(static_cast<size_t>(rows * d));
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  inner_.download(xh.data(), x, xh.size() * sizeof(float));
  inner_.download(ids.data(), experts, ids.size() * sizeof(int32_t));
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = ids[static_cast<size_t>(t * k + i)];
      if (e < 0 || e >= E) fail("imatrix: expert id {} outside [0, {})", e, E);
      by_expert[static_cast<size_t>(e)].push_back(t);
    }
  for (int64_t e = 0; e < E; ++e) {
    const auto& ts = by_expert[static_cast<size_t>(e)];
    if (ts.empty()) continue;
    const int64_t m = static_cast<int64_t>(ts.size());
    std::vector<float> xe(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(xh.data() + ts[static_cast<size_t>(i)] * d, d, xe.data() + i * d);
    observe_rows(gi, e, xe.data(), m, d, 1);
    observe_rows(ui, e, xe.data(), m, d, 1);
    // The down projection's input, recomputed with the wrapped backend's ops.
    Buffer<float> xb(inner_, static_cast<size_t>(m * d)), g(inner_, static_cast<size_t>(m * ff)),
        u(inner_, static_cast<size_t>(m * ff)), h(inner_, static_cast<size_t>(m * ff));
    xb.from_host(xe);
    inner_.matmul(gate.expert(e), xb.data(), m, g.data(), 0, 0);
    inner_.matmul(up.expert(e), xb.data(), m, u.data(), 0, 0);
    inner_.swiglu(g.data(), u.data(), m, ff, limit, nullptr, h.data());
    const std::vector<float> hh = h.to_host();
    observe_rows(di, e, hh.data(), m, ff, 1);
  }
}

}  // namespace ds4::compute
