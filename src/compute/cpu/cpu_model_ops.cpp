// CPU implementation of the model-shaped ops (backend.h): decode attention, CSA indexer
// scores and top-k, compressor store/pool, MoE routing and the routed experts. These are the
// reference every other backend is compared with.
#include "compute/numerics.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "compute/cpu/cpu_backend.h"
#include "core/error.h"
#include "quant/quant.h"

namespace ds4::compute::cpu {

namespace {

float softplus(float x) { return x > 20.0f ? x : log1p_f(exp_f(x)); }

// Tokens per MoE pass: bounds the per-slot output buffer ([chunk][k][d] floats).
constexpr int64_t kMoeChunk = 256;

}  // namespace

void CpuBackend::attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks,
                           float scale, float* out) {
  std::vector<const float*> rows;
  for (int64_t pp = std::max<int64_t>(0, kv.pos - kv.window + 1); pp <= kv.pos; ++pp)
    rows.push_back(kv.ring + (pp % kv.window) * head_dim);
  if (kv.idx) {
    for (int64_t i = 0; i < kv.n_idx; ++i) {
      if (kv.idx[i] < 0 || kv.idx[i] >= kv.n_comp)
        fail("attention: compressed row index {} outside [0, {})", kv.idx[i], kv.n_comp);
      rows.push_back(kv.comp + static_cast<int64_t>(kv.idx[i]) * head_dim);
    }
  } else {
    for (int64_t c = 0; c < kv.n_comp; ++c) rows.push_back(kv.comp + c * head_dim);
  }
  const int64_t count = static_cast<int64_t>(rows.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, head_dim * (count + 1)));
  parallel(n_heads, grain, [&](int64_t h0, int64_t h1) {
    std::vector<float> s(static_cast<size_t>(count));
    for (int64_t h = h0; h < h1; ++h) {
      const float* qh = q + h * head_dim;
      float m = sinks[h];
      quant::dot_f32_rows(qh, rows.data(), count, head_dim, s.data());  // = vec_dot(F32) per row
      for (int64_t k = 0; k < count; ++k) {
        s[k] = s[k] * scale;
        m = std::max(m, s[k]);
      }
      float denom = exp_f(sinks[h] - m);
      float* oh = out + h * head_dim;
      std::fill(oh, oh + head_dim, 0.0f);
      for (int64_t k = 0; k < count; ++k) {
        s[k] = exp_f(s[k] - m);
        denom += s[k];
      }
      quant::fma_f32_rows(s.data(), rows.data(), count, oh, head_dim);  // oh[i] = fma(e_k, v_k[i], oh[i]) in k order
      const float inv = 1.0f / denom;
      for (int64_t i = 0; i < head_dim; ++i) oh[i] *= inv;
    }
  });
}

void CpuBackend::indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim,
                                const float* keys, RowCount keys_count, float* scores) {
  const int64_t n_keys = keys_count.n;
  std::vector<float> wh(static_cast<size_t>(n_heads));
  for (int64_t h = 0; h < n_heads; ++h) wh[h] = w[h] * scale;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_heads * head_dim));
  std::vector<const float*> qh(static_cast<size_t>(n_heads));
  for (int64_t h = 0; h < n_heads; ++h) qh[h] = q + h * head_dim;
  parallel(n_keys, grain, [&](int64_t c0, int64_t c1) {
    std::vector<float> d(static_cast<size_t>(n_heads));
    for (int64_t c = c0; c < c1; ++c) {
      quant::dot_f32_rows(keys + c * head_dim, qh.data(), n_heads, head_dim, d.data());  // = vec_dot(F32) per head
      float s = 0;
      for (int64_t h = 0; h < n_heads; ++h)  // ReLU before the head weighting (trap 12)
        s += wh[h] * std::max(0.0f, d[h]);
      scores[c] = s;
    }
  });
}

void CpuBackend::top_k(const float* scores, RowCount count, int64_t k, int32_t* idx) {
  const int64_t n = count.n;
  if (k > n || k < 0) fail("top_k: k {} outside [0, {}]", k, n);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Highest score first; equal scores keep the lower row (ds4's tie rule).
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  std::sort(order.begin(), order.begin() + k);
  std::copy_n(order.begin(), k, idx);
}

void CpuBackend::compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                                  const float* scp, int64_t width, float* kv, float* score) {
  if (ratio <= 0 || pos < 0) fail("compressor_store: ratio {}, position {}", ratio, pos);
  const int64_t ape_row = pos % ratio, slot = (lanes == 2 ? ratio : 0) + ape_row;
  float* kv_slot = kv + slot * width;
  float* score_slot = score + slot * width;
  std::memcpy(kv_slot, kvp, static_cast<size_t>(width) * sizeof(float));
  decode_row(ape, ape_row, score_slot);
  for (int64_t j = 0; j < width; ++j) score_slot[j] += scp[j];
}

void CpuBackend::compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                                 float* out) {
  const int64_t slots = lanes * ratio, W = lanes * dim;
  for (int64_t j = 0; j < dim; ++j) {
    auto at = [&](const float* base, int64_t s) {
      const int64_t col = (lanes == 2 && s >= ratio) ? dim : 0;
      return base[s * W + col + j];
    };
    float m = -INFINITY;
    for (int64_t s = 0; s < slots; ++s) m = std::max(m, at(score, s));
    if (m == -INFINITY) {
      out[j] = 0;
      continue;
    }
    float den = 0, num = 0;
    for (int64_t s = 0; s < slots; ++s) {
      float e = exp_f(at(score, s) - m);
      den += e;
      num += e * at(kv, s);
    }
    out[j] = num / den;
  }
}

void CpuBackend::moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p,
                           int32_t* experts, float* weights) {
  const int64_t E = p.n_expert, K = p.k;
  std::vector<float> s(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  std::vector<int32_t> idx(static_cast<size_t>(E));
  for (int64_t t = 0; t < rows; ++t) {
    const float* lt = logits + t * E;
    int32_t* ex = experts + t * K;
    float* wt = weights + t * K;
    for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(softplus(lt[e]));
    if (p.tid2eid) {
      std::copy_n(p.tid2eid + static_cast<int64_t>(tokens[t]) * K, K, ex);
      for (int64_t k = 0; k < K; ++k)
        if (ex[k] < 0 || ex[k] >= E) fail("moe_route: hash table gives expert {} for token {}", ex[k], tokens[t]);
    } else if (p.forced) {
      std::copy_n(p.forced + t * K, K, ex);
      for (int64_t k = 0; k < K; ++k)
        if (ex[k] < 0 || ex[k] >= E) fail("moe_route: forced expert {} outside [0, {})", ex[k], E);
    } else {
      // The bias steers selection only; weights use the unbiased scores (trap 13).
      sel = s;
      if (p.bias)
        for (int64_t e = 0; e < E; ++e) sel[e] += p.bias[e];
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                        [&](int32_t a, int32_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); });
      std::copy_n(idx.begin(), K, ex);
    }
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += wt[k] = s[ex[k]];
    const float denom = p.norm ? std::max(sum, 6.103515625e-5f) : 1.0f;  // ds4's clamp (trap 15)
    for (int64_t k = 0; k < K; ++k) wt[k] = wt[k] / denom * p.scale;
  }
}

void CpuBackend::moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                             const int32_t* experts, const float* weights, int64_t rows, int64_t K, float limit,
                             float* y) {
  const int64_t d = gate.first.n_in, ff = gate.first.n_out, E = gate.n_expert;
  std::fill(y, y + rows * d, 0.0f);
  // Tokens are grouped by expert so each expert's weights stream once per chunk; each token's
  // expert outputs are then summed in slot order, so the result does not depend on the grouping.
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));  // slots (t*K + k) per expert
  for (int64_t c0 = 0; c0 < rows; c0 += kMoeChunk) {
    const int64_t c1 = std::min(rows, c0 + kMoeChunk), cn = c1 - c0;
    for (auto& v : by_expert) v.clear();
    for (int64_t t = c0; t < c1; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = experts[t * K + k];
        if (e < 0 || e >= E) fail("moe_experts: expert id {} outside [0, {})", e, E);
        by_expert[static_cast<size_t>(e)].push_back(t * K + k);
      }
    moe_slot_out_.assign(static_cast<size_t>(cn * K * d), 0.0f);
    for (int64_t e = 0; e < E; ++e) {
      const auto& slots = by_expert[static_cast<size_t>(e)];
      if (slots.empty()) continue;
      const int64_t m = static_cast<int64_t>(slots.size());
      moe_xg_.resize(static_cast<size_t>(m * d));
      moe_w_.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(moe_xg_.data() + i * d, x + (slots[i] / K) * d, static_cast<size_t>(d) * sizeof(float));
        moe_w_[i] = weights[slots[i]];
      }
      moe_g_.resize(static_cast<size_t>(m * ff));
      moe_u_.resize(static_cast<size_t>(m * ff));
      moe_h_.resize(static_cast<size_t>(m * ff));
      matmul(gate.expert(e), moe_xg_.data(), m, moe_g_.data(), 0, 0);
      matmul(up.expert(e), moe_xg_.data(), m, moe_u_.data(), 0, 0);
      // The routing weight multiplies before the down projection (trap 14).
      swiglu(moe_g_.data(), moe_u_.data(), m, ff, limit, moe_w_.data(), moe_h_.data());
      moe_yd_.resize(static_cast<size_t>(m * d));
      matmul(down.expert(e), moe_h_.data(), m, moe_yd_.data(), 0, 0);
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(moe_slot_out_.data() + (slots[i] - c0 * K) * d, moe_yd_.data() + i * d,
                    static_cast<size_t>(d) * sizeof(float));
    }
    for (int64_t t = c0; t < c1; ++t) {
      float* yt = y + t * d;
      for (int64_t k = 0; k < K; ++k) {
        const float* s = moe_slot_out_.data() + ((t - c0) * K + k) * d;
        for (int64_t i = 0; i < d; ++i) yt[i] += s[i];
      }
    }
  }
}

}  // namespace ds4::compute::cpu
