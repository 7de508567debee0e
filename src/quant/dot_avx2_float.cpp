// AVX2/FMA float dot products (F32, F16, BF16 weights against F32 activations). Compiled
// with -mavx2 -mfma -mf16c; called only after a run-time CPU check (quant.cpp).
// These use fused multiply-adds and 32 interleaved partial sums, so they differ from the
// scalar kernels by rounding only; the bound is stated in quant.h and tested.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/kernels.h"

namespace ds4::quant {

namespace {

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

inline float bf16_scalar(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Four independent 8-wide FMA chains hide the FMA latency; tail elements are added last.
template <class Load8, class Load1>
float dot_fma(const float* x, int64_t n, Load8 load8, Load1 load1) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(load8(i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load8(i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(load8(i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(load8(i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load8(i), _mm256_loadu_ps(x + i), a0);
  float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += load1(i) * x[i];
  return sum;
}

}  // namespace

float vec_dot_f32_f32_avx2(const void* w, const void* x, int64_t n) {
  const auto* wf = static_cast<const float*>(w);
  return dot_fma(
      static_cast<const float*>(x), n, [wf](int64_t i) { return _mm256_loadu_ps(wf + i); },
      [wf](int64_t i) { return wf[i]; });
}

float vec_dot_f16_f32_avx2(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  return dot_fma(
      static_cast<const float*>(x), n, [wh](int64_t i) { return load_f16x8(wh + i); },
      [wh](int64_t i) { return _cvtsh_ss(wh[i]); });
}

float vec_dot_bf16_f32_avx2(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  return dot_fma(
      static_cast<const float*>(x), n, [wh](int64_t i) { return load_bf16x8(wh + i); },
      [wh](int64_t i) { return bf16_scalar(wh[i]); });
}

// y[i] = fma(a[k], rows[k][i], y[i]) in row order, y loaded and stored once per group of 4 rows.
void fma_f32_rows_avx2(const float* a, const float* const* rows, int64_t count, float* y, int64_t n) {
  for (int64_t k0 = 0; k0 < count; k0 += 4) {
    const int kn = count - k0 < 4 ? static_cast<int>(count - k0) : 4;
    __m256 va[4];
    for (int k = 0; k < kn; ++k) va[k] = _mm256_set1_ps(a[k0 + k]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(y + i);
      for (int k = 0; k < kn; ++k) v = _mm256_fmadd_ps(va[k], _mm256_loadu_ps(rows[k0 + k] + i), v);
      _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; ++i)
      for (int k = 0; k < kn; ++k) y[i] = std::fma(a[k0 + k], rows[k0 + k][i], y[i]);
  }
}

// y += a * x element by element: a rounded product, then a rounded add (no FMA), so every
// element is the scalar kernel's float.
void axpy_f32_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) {
    float p = a * x[i];
    __asm__("" : "+x"(p));
    y[i] = y[i] + p;
  }
}

}  // namespace ds4::quant
