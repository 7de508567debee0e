#pragma once
// Helpers shared by the AVX2 kernel files (dot_avx2_int.cpp, dot_avx2_ext.cpp,
// iq2_xxs_avx2.cpp). Include only from files compiled with -mavx2 -mfma -mf16c. Everything is
// static inline (internal linkage), so no AVX2 copy of a helper can be picked by the linker
// for portable code (see blocks.h).
#include <immintrin.h>

#include <cstdint>

namespace ds4::quant::avx2 {

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Sum of the 8 int32 lanes (integer adds: the order does not matter).
static inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// Products of signed bytes 0..15 (lo) and 16..31 (hi) of w and q, as 8 int32 partial sums.
// Widening to int16 first keeps it exact for every byte pair (-128 included), unlike the
// maddubs sign trick.
static inline __m256i dot_lo(__m256i w, __m256i q) {
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
}
static inline __m256i dot_hi(__m256i w, __m256i q) {
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)),
                           _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
}
static inline __m256i dot32(__m256i w, __m256i q) { return _mm256_add_epi32(dot_lo(w, q), dot_hi(w, q)); }

}  // namespace ds4::quant::avx2
