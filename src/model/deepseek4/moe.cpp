// MoE sublayer of DeepSeek V4 (spec §6.8): sqrt(softplus) router, hash-routed early layers,
// selection-only bias, clamped SwiGLU with the routing weight applied before the down
// projection, and the shared expert. Tokens are grouped by expert so each expert's weights
// stream once per batch; each token's expert outputs are then summed in slot order, so the
// result does not depend on how tokens were grouped.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "model/deepseek4/forward.h"

namespace ds4::model::deepseek4 {

namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Tokens per MoE pass: bounds the per-slot output buffer ([chunk][k][d] floats).
constexpr int64_t kMoeChunk = 256;

}  // namespace

void Forward::route(int64_t il, const float* logits, int32_t token, int32_t* experts, float* weights) const {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t E = hp_.n_expert, K = hp_.n_expert_used;
  std::vector<float> s(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(softplus(logits[e]));
  if (L.tid2eid) {
    std::copy_n(L.tid2eid + static_cast<int64_t>(token) * K, K, experts);
  } else {
    // The bias steers selection only; weights use the unbiased scores (trap 13).
    std::vector<float> sel(s);
    if (L.router_bias)
      for (int64_t e = 0; e < E; ++e) sel[e] += L.router_bias[e];
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                      [&](int32_t a, int32_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); });
    std::copy_n(idx.begin(), K, experts);
  }
  float sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += weights[k] = s[experts[k]];
  const float denom = hp_.expert_weights_norm ? std::max(sum, 6.103515625e-5f) : 1.0f;  // ds4's clamp (trap 15)
  for (int64_t k = 0; k < K; ++k) weights[k] = weights[k] / denom * hp_.expert_weights_scale;
}

void Forward::ffn_layer(int64_t il, const std::vector<float>& X, std::vector<float>& Xout) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
  const int64_t d = hp_.n_embd, E = hp_.n_expert, K = hp_.n_expert_used, ff = hp_.expert_ff;
  const float limit = hp_.swiglu_limit[static_cast<size_t>(il)];

  HcMix mix = hc_pre(L.hc_ffn_fn, L.hc_ffn_base, L.hc_ffn_scale, X);
  std::vector<float> f(static_cast<size_t>(n_ * d));
  be_.rms_norm(mix.x_in.data(), L.ffn_norm, d, n_, hp_.rms_eps, f.data());

  std::vector<float> logits(static_cast<size_t>(n_ * E));
  be_.matmul(L.router, f.data(), n_, logits.data());
  std::vector<int32_t> experts(static_cast<size_t>(n_ * K));
  std::vector<float> weights(static_cast<size_t>(n_ * K));
  for (int64_t t = 0; t < n_; ++t)
    route(il, logits.data() + t * E, tokens_[t], experts.data() + t * K, weights.data() + t * K);

  std::vector<float> y(static_cast<size_t>(n_ * d), 0.0f);
  std::vector<float> slot_out, xg, g, u, h, yd;
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));  // slots (t*K + k) per expert
  for (int64_t c0 = 0; c0 < n_; c0 += kMoeChunk) {
    const int64_t c1 = std::min(n_, c0 + kMoeChunk), cn = c1 - c0;
    for (auto& v : by_expert) v.clear();
    for (int64_t t = c0; t < c1; ++t)
      for (int64_t k = 0; k < K; ++k) by_expert[static_cast<size_t>(experts[t * K + k])].push_back(t * K + k);
    slot_out.assign(static_cast<size_t>(cn * K * d), 0.0f);
    for (int64_t e = 0; e < E; ++e) {
      const auto& slots = by_expert[static_cast<size_t>(e)];
      if (slots.empty()) continue;
      const int64_t m = static_cast<int64_t>(slots.size());
      xg.resize(static_cast<size_t>(m * d));
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(xg.data() + i * d, f.data() + (slots[i] / K) * d, static_cast<size_t>(d) * sizeof(float));
      g.resize(static_cast<size_t>(m * ff));
      u.resize(static_cast<size_t>(m * ff));
      h.resize(static_cast<size_t>(m * ff));
      be_.matmul(L.gate_exps.expert(e), xg.data(), m, g.data());
      be_.matmul(L.up_exps.expert(e), xg.data(), m, u.data());
      for (int64_t i = 0; i < m; ++i)  // routing weight before the down projection (trap 14)
        be_.swiglu(g.data() + i * ff, u.data() + i * ff, ff, limit, weights[slots[i]], h.data() + i * ff);
      yd.resize(static_cast<size_t>(m * d));
      be_.matmul(L.down_exps.expert(e), h.data(), m, yd.data());
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(slot_out.data() + (slots[i] - c0 * K) * d, yd.data() + i * d, static_cast<size_t>(d) * sizeof(float));
    }
    for (int64_t t = c0; t < c1; ++t) {
      float* yt = y.data() + t * d;
      for (int64_t k = 0; k < K; ++k) {
        const float* s = slot_out.data() + ((t - c0) * K + k) * d;
        for (int64_t i = 0; i < d; ++i) yt[i] += s[i];
      }
    }
  }

  if (L.has_shared) {
    const int64_t sff = L.gate_sh.n_out;
    std::vector<float> gs(static_cast<size_t>(n_ * sff)), us(gs.size()), hs(gs.size()), ys(static_cast<size_t>(n_ * d));
    be_.matmul(L.gate_sh, f.data(), n_, gs.data());
    be_.matmul(L.up_sh, f.data(), n_, us.data());
    be_.swiglu(gs.data(), us.data(), n_ * sff, limit, 1.0f, hs.data());
    be_.matmul(L.down_sh, hs.data(), n_, ys.data());
    for (size_t i = 0; i < y.size(); ++i) y[i] += ys[i];
  }
  hc_post(mix, y, X, Xout);
}

}  // namespace ds4::model::deepseek4
