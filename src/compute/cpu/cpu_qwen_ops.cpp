// CPU implementation of the qwen35moe backend ops (backend.h): strided copies, NeoX RoPE,
// sigmoid gates, causal GQA attention, the softmax router, the short causal convolution and
// the gated delta rule of Gated DeltaNet. Plain C++ over the thread pool; every row of an
// output is computed the same way whatever the batch, so prefill and decode agree exactly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/cpu/cpu_backend.h"
#include "core/error.h"

namespace ds4::compute::cpu {

namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void CpuBackend::copy_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(y + r * y_stride, x + r * x_stride, static_cast<size_t>(n) * sizeof(float));
}

void CpuBackend::rope_neox(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                           int64_t pos0) {
  const int64_t half = static_cast<int64_t>(freqs.size());
  if (2 * half > head_dim) fail("rope_neox: {} rotary dims exceed the head size {}", 2 * half, head_dim);
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(pos0 + r);
    for (int64_t i = 0; i < half; ++i) {
      const double th = pos * freqs[static_cast<size_t>(i)];
      c[static_cast<size_t>(i)] = static_cast<float>(std::cos(th));
      s[static_cast<size_t>(i)] = static_cast<float>(std::sin(th));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[static_cast<size_t>(i)] - b * s[static_cast<size_t>(i)];
        v[i + half] = b * c[static_cast<size_t>(i)] + a * s[static_cast<size_t>(i)];
      }
    }
  }
}

void CpuBackend::mul_sigmoid(float* y, const float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= sigmoidf(g[i]);
}

void CpuBackend::sigmoid(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoidf(x[i]);
}

void CpuBackend::attention_causal(const float* q, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                  const float* k_cache, const float* v_cache, int64_t pos0, float scale, float* out) {
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    fail("attention_causal: {} query heads do not group over {} KV heads", n_heads, n_kv_heads);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kv_row = n_kv_heads * head_dim;
  const int64_t tasks = rows * n_heads;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, head_dim * (pos0 + rows)));
  parallel(tasks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> sc;
    std::vector<float> acc(static_cast<size_t>(head_dim));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / n_heads, h = t % n_heads, kh = h / group;
      const int64_t n_pos = pos0 + r + 1;
      const float* qh = q + (r * n_heads + h) * head_dim;
      sc.resize(static_cast<size_t>(n_pos));
      float m = -INFINITY;
      for (int64_t p = 0; p < n_pos; ++p) {
        sc[static_cast<size_t>(p)] = scale * dot(qh, k_cache + p * kv_row + kh * head_dim, head_dim);
        m = std::max(m, sc[static_cast<size_t>(p)]);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < n_pos; ++p) {
        sc[static_cast<size_t>(p)] = std::exp(sc[static_cast<size_t>(p)] - m);
        sum += sc[static_cast<size_t>(p)];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = 0; p < n_pos; ++p) {
        const float wgt = sc[static_cast<size_t>(p)];
        const float* vp = v_cache + p * kv_row + kh * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) acc[static_cast<size_t>(i)] += wgt * vp[i];
      }
      float* oh = out + (r * n_heads + h) * head_dim;
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < head_dim; ++i) oh[i] = acc[static_cast<size_t>(i)] * inv;
    }
  });
}

void CpuBackend::moe_route_softmax(const float* logits, int64_t rows, int64_t n_expert, int64_t k, bool norm,
                                   int32_t* experts, float* weights) {
  if (k < 1 || k > n_expert) fail("moe_route_softmax: top-{} of {} experts", k, n_expert);
  std::vector<float> p(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n_expert;
    float m = -INFINITY;
    for (int64_t e = 0; e < n_expert; ++e) m = std::max(m, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_expert; ++e) sum += (p[static_cast<size_t>(e)] = std::exp(l[e] - m));
    for (int64_t e = 0; e < n_expert; ++e) p[static_cast<size_t>(e)] /= sum;
    for (int64_t e = 0; e < n_expert; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float denom = 0.0f;
    for (int64_t i = 0; i < k; ++i) denom += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = order[static_cast<size_t>(i)];
      experts[r * k + i] = e;
      weights[r * k + i] = norm ? p[static_cast<size_t>(e)] / denom : p[static_cast<size_t>(e)];
    }
  }
}

void CpuBackend::conv1d_silu(const float* x, int64_t rows, int64_t channels, int64_t kernel, const float* w,
                             float* conv_state, float* y) {
  if (kernel < 1) fail("conv1d_silu: kernel size {}", kernel);
  const int64_t hist = kernel - 1;
  parallel(channels, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* wc = w + c * kernel;
      for (int64_t t = 0; t < rows; ++t) {
        const float xv = x[t * channels + c];
        float acc = 0.0f;
        for (int64_t j = 0; j < hist; ++j) acc += wc[j] * conv_state[j * channels + c];
        acc += wc[hist] * xv;
        for (int64_t j = 0; j + 1 < hist; ++j) conv_state[j * channels + c] = conv_state[(j + 1) * channels + c];
        if (hist > 0) conv_state[(hist - 1) * channels + c] = xv;
        y[t * channels + c] = acc * sigmoidf(acc);
      }
    }
  });
}

void CpuBackend::gdn_gates(const float* a, const float* b, const float* dt_bias, const float* ssm_a, int64_t rows,
                           int64_t n_heads, float* g, float* beta) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t i = r * n_heads + h;
      g[i] = ssm_a[h] * softplus(a[i] + dt_bias[h]);
      beta[i] = sigmoidf(b[i]);
    }
}

void CpuBackend::gated_delta_rule(const float* qkv, const float* g, const float* beta, int64_t rows,
                                  int64_t n_k_heads, int64_t n_v_heads, int64_t dk, int64_t dv, float l2_eps,
                                  float* state, float* out) {
  if (n_k_heads <= 0 || n_v_heads % n_k_heads != 0)
    fail("gated_delta_rule: {} value heads do not tile over {} key heads", n_v_heads, n_k_heads);
  const int64_t row = 2 * n_k_heads * dk + n_v_heads * dv;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  parallel(n_v_heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk));
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = h % n_k_heads;
      float* S = state + h * dv * dk;
      for (int64_t r = 0; r < rows; ++r) {
        const float* base = qkv + r * row;
        const float* q = base + kh * dk;
        const float* k = base + n_k_heads * dk + kh * dk;
        const float* v = base + 2 * n_k_heads * dk + h * dv;
        float qq = 0.0f, kk = 0.0f;
        for (int64_t i = 0; i < dk; ++i) qq += q[i] * q[i], kk += k[i] * k[i];
        const float qi = q_scale / std::sqrt(qq + l2_eps), ki = 1.0f / std::sqrt(kk + l2_eps);
        for (int64_t i = 0; i < dk; ++i) qn[static_cast<size_t>(i)] = q[i] * qi, kn[static_cast<size_t>(i)] = k[i] * ki;
        const float decay = std::exp(g[r * n_v_heads + h]);
        const float bt = beta[r * n_v_heads + h];
        float* o = out + (r * n_v_heads + h) * dv;
        for (int64_t j = 0; j < dv; ++j) {
          float* Sj = S + j * dk;
          float mem = 0.0f;
          for (int64_t i = 0; i < dk; ++i) {
            Sj[i] *= decay;
            mem += Sj[i] * kn[static_cast<size_t>(i)];
          }
          const float d = bt * (v[j] - mem);
          float acc = 0.0f;
          for (int64_t i = 0; i < dk; ++i) {
            Sj[i] += d * kn[static_cast<size_t>(i)];
            acc += Sj[i] * qn[static_cast<size_t>(i)];
          }
          o[j] = acc;
        }
      }
    }
  });
}

}  // namespace ds4::compute::cpu
