// CPU implementation of the backend ops: scalar C++ over the thread pool. Quantized dot
// products come from ds4_quant (AVX2 where the CPU has it).
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/backend.h"
#include "compute/numerics.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace ds4::compute {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(ThreadPool* pool, CpuOptions opt) : pool_(pool), opt_(opt) {}
  const char* name() const override { return "cpu"; }

  void matmul(const Matrix& w, const float* x, int64_t rows, float* y) override;
  void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) override;
  void rope_tail(float* x, int64_t n_heads, int64_t head_dim, std::span<const double> freqs, int64_t pos,
                 bool inverse) override;
  void sink_attention(const float* q, int64_t n_heads, int64_t head_dim, KvRows kv, const float* sinks, float scale,
                      float* out) override;
  void indexer_scores(const float* q, const float* w, int64_t n_heads, int64_t head_dim, const float* keys,
                      int64_t n_keys, float* scores) override;
  void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
              float* comb) override;
  void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) override;
  void hc_post(const float* y, const float* X, const float* post, const float* comb, int n_hc, int64_t n,
               float* Xout) override;
  void swiglu(const float* g, const float* u, int64_t n, float limit, float weight, float* h) override;
  void softmax_pool(const float* const* values, const float* const* scores, int64_t slots, int64_t n,
                    float* out) override;

 private:
  void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool_) pool_->parallel_for(n, grain, fn);
    else fn(0, n);
  }
  void matmul_float_acts(const Matrix& w, const float* x, int64_t rows, float* y);
  ThreadPool* pool_;
  CpuOptions opt_;
  std::vector<uint8_t> act_buf_;
};

void CpuBackend::matmul(const Matrix& w, const float* x, int64_t rows, float* y) {
  if (rows <= 0 || w.n_out <= 0) return;
  // Activations go to the format the weight's dot product expects (Q8_0 / Q8_K for quantized
  // weights, as ggml and ds4 do; f32 rows are used as they are).
  const GgmlType at = quant::vec_dot_type(w.type);
  if (opt_.float_activations && at != GgmlType::F32) return matmul_float_acts(w, x, rows, y);
  const uint8_t* acts = reinterpret_cast<const uint8_t*>(x);
  size_t abytes = static_cast<size_t>(w.n_in) * sizeof(float);
  if (at != GgmlType::F32) {
    abytes = row_bytes(traits(at), static_cast<uint64_t>(w.n_in));
    act_buf_.resize(abytes * static_cast<size_t>(rows));
    uint8_t* q = act_buf_.data();
    parallel(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) quant::quantize_activation_row(at, x + r * w.n_in, q + r * abytes, w.n_in);
    });
    acts = q;
  }
  // Tiles of kTile weight rows stay in cache while every activation row passes over them, so
  // each weight byte is read from memory once per call. Every (row, token) dot is computed the
  // same way whatever the batch, which keeps prefill and decode identical.
  constexpr int64_t kTile = 16;
  const int64_t n_tiles = (w.n_out + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, w.n_in * rows * kTile));
  parallel(n_tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = t * kTile, o1 = std::min(w.n_out, o0 + kTile);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* a = acts + static_cast<size_t>(r) * abytes;
        float* yr = y + r * w.n_out;
        for (int64_t o = o0; o < o1; ++o) yr[o] = quant::vec_dot(w.type, w.row(o), a, w.n_in);
      }
    }
  });
}

void CpuBackend::matmul_float_acts(const Matrix& w, const float* x, int64_t rows, float* y) {
  parallel(w.n_out, 1, [&](int64_t o0, int64_t o1) {
    std::vector<float> wr(static_cast<size_t>(w.n_in));
    for (int64_t o = o0; o < o1; ++o) {
      quant::dequantize_row(w.type, w.row(o), wr.data(), w.n_in);
      for (int64_t r = 0; r < rows; ++r)
        y[r * w.n_out + o] = quant::vec_dot(GgmlType::F32, wr.data(), x + r * w.n_in, w.n_in);
    }
  });
}

void CpuBackend::rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
  }
}

void CpuBackend::rope_tail(float* x, int64_t n_heads, int64_t head_dim, std::span<const double> freqs, int64_t pos,
                           bool inverse) {
  const int64_t n_rot = static_cast<int64_t>(freqs.size()) * 2;
  const int64_t first = head_dim - n_rot;
  // Angles directly as pos * f_k in double (trap 19: no iterative products).
  std::vector<float> c(freqs.size()), s(freqs.size());
  for (size_t k = 0; k < freqs.size(); ++k) {
    double th = static_cast<double>(pos) * freqs[k];
    c[k] = static_cast<float>(std::cos(th));
    s[k] = static_cast<float>(inverse ? -std::sin(th) : std::sin(th));
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* t = x + h * head_dim + first;
    for (size_t k = 0; k < freqs.size(); ++k) {
      float x0 = t[2 * k], x1 = t[2 * k + 1];
      t[2 * k] = x0 * c[k] - x1 * s[k];
      t[2 * k + 1] = x0 * s[k] + x1 * c[k];
    }
  }
}

void CpuBackend::sink_attention(const float* q, int64_t n_heads, int64_t head_dim, KvRows kv, const float* sinks,
                                float scale, float* out) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, head_dim * (kv.count + 1)));
  parallel(n_heads, grain, [&](int64_t h0, int64_t h1) {
    std::vector<float> s(static_cast<size_t>(kv.count));
    for (int64_t h = h0; h < h1; ++h) {
      const float* qh = q + h * head_dim;
      float m = sinks[h];
      for (int64_t k = 0; k < kv.count; ++k) {
        s[k] = quant::vec_dot(GgmlType::F32, qh, kv.rows[k], head_dim) * scale;
        m = std::max(m, s[k]);
      }
      float denom = std::exp(sinks[h] - m);
      float* oh = out + h * head_dim;
      std::fill(oh, oh + head_dim, 0.0f);
      for (int64_t k = 0; k < kv.count; ++k) {
        float e = std::exp(s[k] - m);
        denom += e;
        const float* v = kv.rows[k];
        for (int64_t i = 0; i < head_dim; ++i) oh[i] += e * v[i];
      }
      const float inv = 1.0f / denom;
      for (int64_t i = 0; i < head_dim; ++i) oh[i] *= inv;
    }
  });
}

void CpuBackend::indexer_scores(const float* q, const float* w, int64_t n_heads, int64_t head_dim, const float* keys,
                                int64_t n_keys, float* scores) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_heads * head_dim));
  parallel(n_keys, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* k = keys + c * head_dim;
      float s = 0;
      for (int64_t h = 0; h < n_heads; ++h)  // ReLU before the head weighting (trap 12)
        s += w[h] * std::max(0.0f, quant::vec_dot(GgmlType::F32, q + h * head_dim, k, head_dim));
      scores[c] = s;
    }
  });
}

void CpuBackend::hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
                        float* comb) {
  const int hc = p.n_hc;
  const int64_t width = hc * p.n;
  const bool head = post == nullptr;
  const int64_t n_mix = head ? hc : (2 + hc) * hc;
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t r = 0; r < rows; ++r) {
    const float* Xr = X + r * width;
    float* m = mix + r * n_mix;
    // The RMS over all streams scales the mixes only; the streams are summed un-normalized.
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(Xr[i]) * Xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(width) + p.rms_eps));
    for (int64_t k = 0; k < n_mix; ++k) m[k] *= inv;
    if (head) {
      for (int i = 0; i < hc; ++i) pre[i] = 1.0f / (1.0f + std::exp(-(m[i] * p.scale[0] + p.base[i]))) + p.hc_eps;
    } else {
      hc_split_mix(m, p.scale, p.base, hc, p.sinkhorn_iters, p.hc_eps, pre.data(), post + r * hc, comb + r * hc * hc);
    }
    float* xo = x_in + r * p.n;
    for (int64_t i = 0; i < p.n; ++i) {
      float acc = 0;
      for (int s = 0; s < hc; ++s) acc += pre[s] * Xr[s * p.n + i];
      xo[i] = acc;
    }
  }
}

void CpuBackend::act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * row_len;
    if (kind == ActRound::Fp8) {
      fp8_e4m3_round_trip(xr, n_round);
    } else {
      hadamard_transform(xr, n_round);
      fp4_e2m1_round_trip(xr, n_round);
    }
  }
}

void CpuBackend::hc_post(const float* y, const float* X, const float* post, const float* comb, int n_hc, int64_t n,
                         float* Xout) {
  for (int j = 0; j < n_hc; ++j) {
    float* o = Xout + j * n;
    for (int64_t d = 0; d < n; ++d) {
      float acc = post[j] * y[d];
      for (int i = 0; i < n_hc; ++i) acc += comb[i * n_hc + j] * X[i * n + d];
      o[d] = acc;
    }
  }
}

void CpuBackend::swiglu(const float* g, const float* u, int64_t n, float limit, float weight, float* h) {
  for (int64_t i = 0; i < n; ++i) {
    float gv = g[i], uv = u[i];
    if (limit > 0) {
      gv = std::min(gv, limit);
      uv = std::clamp(uv, -limit, limit);
    }
    float silu = gv / (1.0f + std::exp(-gv));
    h[i] = silu * uv * weight;
  }
}

void CpuBackend::softmax_pool(const float* const* values, const float* const* scores, int64_t slots, int64_t n,
                              float* out) {
  for (int64_t j = 0; j < n; ++j) {
    float m = -INFINITY;
    for (int64_t s = 0; s < slots; ++s) m = std::max(m, scores[s][j]);
    if (m == -INFINITY) {
      out[j] = 0;
      continue;
    }
    float den = 0, num = 0;
    for (int64_t s = 0; s < slots; ++s) {
      float e = std::exp(scores[s][j] - m);
      den += e;
      num += e * values[s][j];
    }
    out[j] = num / den;
  }
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool, CpuOptions opt) {
  return std::make_unique<CpuBackend>(pool, opt);
}

}  // namespace ds4::compute
