// AVX2 row decoders for Q8_0, Q2_K, Q4_K, F16 and BF16 (compiled with -mavx2 -mfma -mf16c,
// chosen at run time by quant.cpp). Each output element is computed with the scalar
// decoder's operations (int->float, one multiply, one subtract; F16C widening is exact), so
// results are bit-identical to the scalar code and to ggml; nothing here fuses or reorders.
#include <immintrin.h>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace ds4::quant {

namespace {

// 8 unsigned bytes -> 8 floats.
inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// dst[0..16) = dl * q[t] - ml for 16 codes already isolated in the bytes of q.
inline void store16(float* dst, __m128i q, float dl, float ml) {
  const __m256 d = _mm256_set1_ps(dl), m = _mm256_set1_ps(ml);
  _mm256_storeu_ps(dst, _mm256_sub_ps(_mm256_mul_ps(d, u8x8_to_ps(q)), m));
  _mm256_storeu_ps(dst + 8, _mm256_sub_ps(_mm256_mul_ps(d, u8x8_to_ps(_mm_srli_si128(q, 8))), m));
}

}  // namespace

void dequantize_row_q8_0_avx2(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + 8 * k));
      _mm256_storeu_ps(dst + i * kQK8_0 + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

void dequantize_row_q2_K_avx2(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  const __m128i m3 = _mm_set1_epi8(3);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    float* y = dst + i * kQK_K;
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 32 * h + 16 * half));
        for (int s = 0; s < 4; ++s) {
          const uint8_t sc = b[i].scales[8 * h + 2 * s + half];
          const __m128i codes = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * s)), m3);
          store16(y + 128 * h + 32 * s + 16 * half, codes, d * (sc & 0xF), dmin * (sc >> 4));
        }
      }
  }
}

void dequantize_row_q4_K_avx2(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  const __m128i m15 = _mm_set1_epi8(0xF);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    float* y = dst + i * kQK_K;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      q4k_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int part = 0; part < 2; ++part) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 32 * c + 16 * part));
        store16(y + 64 * c + 16 * part, _mm_and_si128(q, m15), d1, m1);
        store16(y + 64 * c + 32 + 16 * part, _mm_and_si128(_mm_srli_epi16(q, 4), m15), d2, m2);
      }
    }
  }
}

void dequantize_row_f16_avx2(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i]);
}

void dequantize_row_bf16_avx2(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(u, 16));
  }
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    __builtin_memcpy(dst + i, &u, 4);
  }
}

}  // namespace ds4::quant
