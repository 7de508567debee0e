// AVX-512 versions of DeepSeek V4's activation rounding (compute/numerics.h is the reference):
// the FP8 E4M3 round trip in blocks of 64, the FP4 E2M1 round trip in blocks of 32 and the
// Walsh-Hadamard transform. Each gives the reference's floats bit for bit:
//  - the block scale is computed as the reference does (scalar, once per block);
//  - x / s is the same IEEE division; |v| < 448 (or < 6) is rounded to the grid with every
//    step exact: multiplying by a power of two and rint (ties to even) is the reference's
//    floor / fraction / even-test, and for E4M3 normals keeping 3 mantissa bits with
//    round-to-nearest-even on the bits is rounding to a multiple of the binade's step;
//  - the sign is put back with the sign bit (copysign) and the result multiplied by s;
//  - the Hadamard butterflies are the reference's additions and subtractions, stage by stage,
//    then the same scaling by (float) n^-1/2.
// Blocks holding a NaN or infinity are left to the caller (the functions return how many
// leading elements they did), so the reference handles every non-finite case.
// Compiled with the AVX-512 flags, called only after the run-time check in quant.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kernels.h"

namespace ds4::quant {

namespace {

inline uint32_t fbits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float bitsf(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// 2^ceil(log2(v)) for a positive normal float: v itself when it is a power of two.
inline float pow2_ceil_bits(float v) {
  const uint32_t u = fbits(v);
  if ((u & 0x007FFFFFu) == 0) return v;
  return bitsf((u & 0x7F800000u) + 0x00800000u);
}

// Largest |x| of the block (NaN ignored, as std::max(amax, |x|) ignores it); false when the
// block holds a NaN or infinity.
inline bool block_amax(const float* x, __mmask16 m0, __mmask16 m1, float* amax) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 a0 = _mm512_and_ps(_mm512_maskz_loadu_ps(m0, x), abs_mask);
  const __m512 a1 = _mm512_and_ps(_mm512_maskz_loadu_ps(m1, x + 16), abs_mask);
  if (_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) return false;
  *amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
  return true;
}

// e4m3(clamp(x / s, +-448)) * s for 16 lanes.
inline __m512 e4m3_lanes(__m512 x, __m512 s) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x, s), _mm512_set1_ps(-448.0f)), _mm512_set1_ps(448.0f));
  const __m512 ax = _mm512_and_ps(v, abs_mask);
  const __m512 sign = _mm512_andnot_ps(abs_mask, v);
  // Normals (|v| >= 2^-6): 3 mantissa bits, ties to even, on the bits (a carry moves to the
  // next binade, whose first code is representable; 448 stays 448).
  const __m512i u = _mm512_castps_si512(ax);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1));
  const __m512i rn = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), lsb)),
                                      _mm512_set1_epi32(static_cast<int>(0xFFF00000u)));
  // Below 2^-6: multiples of 2^-9.
  const __m512 sub = _mm512_mul_ps(
      _mm512_roundscale_ps(_mm512_mul_ps(ax, _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm512_set1_ps(1.0f / 512.0f));
  const __mmask16 small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(1.0f / 64.0f), _CMP_LT_OQ);
  const __m512 r = _mm512_mask_blend_ps(small, _mm512_castsi512_ps(rn), sub);
  return _mm512_mul_ps(_mm512_or_ps(r, sign), s);
}

// e2m1(clamp(x / s, +-6)) * s for 16 lanes: steps 0.5 below 2, 1 below 4, 2 below 6.
inline __m512 e2m1_lanes(__m512 x, __m512 s) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x, s), _mm512_set1_ps(-6.0f)), _mm512_set1_ps(6.0f));
  const __m512 ax = _mm512_and_ps(v, abs_mask);
  const __m512 sign = _mm512_andnot_ps(abs_mask, v);
  const __mmask16 lt2 = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(2.0f), _CMP_LT_OQ);
  const __mmask16 lt4 = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(4.0f), _CMP_LT_OQ);
  __m512 inv = _mm512_set1_ps(0.5f), step = _mm512_set1_ps(2.0f);
  inv = _mm512_mask_mov_ps(inv, lt4, _mm512_set1_ps(1.0f));
  step = _mm512_mask_mov_ps(step, lt4, _mm512_set1_ps(1.0f));
  inv = _mm512_mask_mov_ps(inv, lt2, _mm512_set1_ps(2.0f));
  step = _mm512_mask_mov_ps(step, lt2, _mm512_set1_ps(0.5f));
  const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(ax, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_mul_ps(_mm512_or_ps(_mm512_mul_ps(q, step), sign), s);
}

inline __mmask16 lanes_mask(int64_t k) {
  return k >= 16 ? static_cast<__mmask16>(0xFFFF) : k <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << k) - 1);
}

}  // namespace

int64_t fp8_e4m3_round_trip_avx512(float* x, int64_t n) {
  constexpr int64_t kBlock = 64;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t len = n - b0 < kBlock ? n - b0 : kBlock;
    float a0, a1;
    if (!block_amax(x + b0, lanes_mask(len), lanes_mask(len - 16), &a0) ||
        !block_amax(x + b0 + 32, lanes_mask(len - 32), lanes_mask(len - 48), &a1))
      return b0;
    float amax = a0 > a1 ? a0 : a1;
    amax = amax > 1e-4f ? amax : 1e-4f;
    const __m512 s = _mm512_set1_ps(pow2_ceil_bits(amax / 448.0f));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __mmask16 m = lanes_mask(len - 16 * k);
      if (!m) break;
      float* p = x + b0 + 16 * k;
      _mm512_mask_storeu_ps(p, m, e4m3_lanes(_mm512_maskz_loadu_ps(m, p), s));
    }
  }
  return n;
}

int64_t fp4_e2m1_round_trip_avx512(float* x, int64_t n) {
  constexpr int64_t kBlock = 32;
  const float floor_amax = 6.0f * 0x1p-126f;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t len = n - b0 < kBlock ? n - b0 : kBlock;
    const __mmask16 m0 = lanes_mask(len), m1 = lanes_mask(len - 16);
    float amax;
    if (!block_amax(x + b0, m0, m1, &amax)) return b0;
    amax = amax > floor_amax ? amax : floor_amax;
    const __m512 s = _mm512_set1_ps(pow2_ceil_bits(amax / 6.0f));
    _mm512_mask_storeu_ps(x + b0, m0, e2m1_lanes(_mm512_maskz_loadu_ps(m0, x + b0), s));
    if (m1) _mm512_mask_storeu_ps(x + b0 + 16, m1, e2m1_lanes(_mm512_maskz_loadu_ps(m1, x + b0 + 16), s));
  }
  return n;
}

bool hadamard_transform_avx512(float* x, int64_t n) {
  if (n < 16 || (n & (n - 1)) != 0) return false;
  // Strides 1, 2, 4, 8 inside each 16-lane vector: lane j pairs with j ^ h; the lower lane of
  // a pair gets a + b, the upper one a - b (a: lower value, b: upper value).
  static const int kUpper[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512 p = _mm512_permutexvar_ps(_mm512_xor_si512(lane, _mm512_set1_epi32(1 << k)), v);
      const __mmask16 up = static_cast<__mmask16>(kUpper[k]);
      v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), up, p, v);
    }
    _mm512_storeu_ps(x + i, v);
  }
  for (int64_t h = 16; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; j += 16) {
        const __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
        _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
        _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
      }
  const __m512 sc = _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))));
  for (int64_t i = 0; i < n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), sc));
  return true;
}

}  // namespace ds4::quant
