#include "compute/numerics.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace ds4::compute {

namespace {

// Round |x| (already known finite, >= 0) to the nearest multiple of `step`, ties to an even
// multiple. Within one binade of a minifloat every representable value is such a multiple and
// even multiples are exactly the even mantissa codes, so this implements ties-to-even-code.
float round_to_step_even(float ax, float step) {
  float q = ax / step;  // exact: step is a power of two
  float f = std::floor(q);
  float frac = q - f;
  if (frac > 0.5f || (frac == 0.5f && std::fmod(f, 2.0f) != 0.0f)) f += 1.0f;
  return f * step;
}

// Power-of-two scale 2^ceil(log2(v)) computed exactly from the float's bits (v > 0, normal).
float pow2_ceil(float v) {
  int e;
  float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  if (m == 0.5f) return std::ldexp(1.0f, e - 1);
  return std::ldexp(1.0f, e);
}

}  // namespace

float e4m3_round(float x) {
  if (std::isnan(x)) return x;
  float ax = std::fabs(x);
  if (ax >= 448.0f) return std::copysign(448.0f, x);
  // Spacing: subnormals and the first normal binade [2^-6, 2^-5) step 2^-9; binade
  // [2^k, 2^(k+1)) with k >= -6 steps 2^(k-3). A value rounding up to the next binade
  // lands exactly on its first code, which is representable, so no extra handling.
  float step;
  if (ax < std::ldexp(1.0f, -6)) {
    step = std::ldexp(1.0f, -9);
  } else {
    int e;
    std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
    step = std::ldexp(1.0f, e - 1 - 3);
  }
  float r = round_to_step_even(ax, step);
  if (r > 448.0f) r = 448.0f;  // unreachable once ax < 448 (448 is on the grid) but explicit
  return std::copysign(r, x);
}

float e2m1_round(float x) {
  if (std::isnan(x)) return x;
  float ax = std::fabs(x);
  if (ax >= 6.0f) return std::copysign(6.0f, x);
  // Grid {0,.5,1,1.5} step .5 ; {2,3} step 1 ; {4,6} step 2.
  float step = ax < 2.0f ? 0.5f : (ax < 4.0f ? 1.0f : 2.0f);
  return std::copysign(round_to_step_even(ax, step), x);
}

void fp8_e4m3_round_trip(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    int64_t b1 = std::min(n, b0 + block);
    float amax = 0;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, 1e-4f);
    float s = pow2_ceil(amax / 448.0f);
    for (int64_t i = b0; i < b1; ++i) {
      float v = std::clamp(x[i] / s, -448.0f, 448.0f);
      x[i] = e4m3_round(v) * s;
    }
  }
}

void fp4_e2m1_round_trip(float* x, int64_t n, int64_t block) {
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    int64_t b1 = std::min(n, b0 + block);
    float amax = 0;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, floor_amax);
    float s = pow2_ceil(amax / 6.0f);
    for (int64_t i = b0; i < b1; ++i) {
      float v = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = e2m1_round(v) * s;
    }
  }
}

void hadamard_transform(float* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0) fail("hadamard_transform: size {} is not a power of two", n);
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

YarnRange yarn_range(const RopeParams& p) {
  auto corr = [&](double beta) {
    return static_cast<double>(p.n_rot) * std::log(p.yarn_orig_ctx / (beta * 2 * std::numbers::pi)) /
           (2 * std::log(p.freq_base));
  };
  double low = std::max(0.0, std::floor(corr(p.yarn_beta_fast)));
  double high = std::min(static_cast<double>(p.n_rot - 1), std::ceil(corr(p.yarn_beta_slow)));
  return {low, high};
}

std::vector<double> rope_frequencies(const RopeParams& p) {
  const int64_t half = p.n_rot / 2;
  std::vector<double> f(half);
  for (int64_t k = 0; k < half; ++k)
    f[k] = std::pow(p.freq_base, -2.0 * static_cast<double>(k) / static_cast<double>(p.n_rot));
  if (p.yarn_factor > 1.0 && p.yarn_orig_ctx > 0) {
    YarnRange r = yarn_range(p);
    double high = r.high == r.low ? r.high + 0.001 : r.high;
    for (int64_t k = 0; k < half; ++k) {
      double g = std::clamp((static_cast<double>(k) - r.low) / (high - r.low), 0.0, 1.0);
      f[k] = f[k] * (1 - g) + f[k] / p.yarn_factor * g;
    }
  }
  return f;
}

void hc_split_mix(const float* mix, const float* scale, const float* base, int n_hc, int sinkhorn_iters,
                  float eps, float* pre, float* post, float* comb) {
  auto sigmoid = [](float v) { return 1.0f / (1.0f + exp_f(-v)); };
  for (int i = 0; i < n_hc; ++i) {
    pre[i] = sigmoid(mix[i] * scale[0] + base[i]) + eps;
    post[i] = 2.0f * sigmoid(mix[n_hc + i] * scale[1] + base[n_hc + i]);
  }
  const int off = 2 * n_hc;
  for (int i = 0; i < n_hc; ++i) {
    float* row = comb + i * n_hc;
    float mx = -INFINITY;
    for (int j = 0; j < n_hc; ++j) {
      row[j] = mix[off + i * n_hc + j] * scale[2] + base[off + i * n_hc + j];
      mx = std::max(mx, row[j]);
    }
    float sum = 0;
    for (int j = 0; j < n_hc; ++j) sum += row[j] = exp_f(row[j] - mx);
    for (int j = 0; j < n_hc; ++j) row[j] = row[j] / sum + eps;
  }
  auto col_norm = [&] {
    for (int j = 0; j < n_hc; ++j) {
      float s = 0;
      for (int i = 0; i < n_hc; ++i) s += comb[i * n_hc + j];
      for (int i = 0; i < n_hc; ++i) comb[i * n_hc + j] /= s + eps;
    }
  };
  auto row_norm = [&] {
    for (int i = 0; i < n_hc; ++i) {
      float s = 0;
      for (int j = 0; j < n_hc; ++j) s += comb[i * n_hc + j];
      for (int j = 0; j < n_hc; ++j) comb[i * n_hc + j] /= s + eps;
    }
  };
  // Sinkhorn: one column normalization, then (iters-1) x (row, column).
  col_norm();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    row_norm();
    col_norm();
  }
}

}  // namespace ds4::compute
