// AVX2 dot products of the further formats (kernels_ext.h), compiled with -mavx2 -mfma -mf16c
// and chosen at run time by quant.cpp. Each kernel decodes 32 weights at a time into signed
// bytes, multiplies them with the activations after widening both to int16 (exact for every
// byte pair, -128 included) and sums in int32: the block's integer sums equal the scalar
// kernel's. The per-block float expression and the lane order are the scalar kernel's too,
// so the result is the same float bit for bit (-ffp-contract=off forbids fused operations).
// No std:: or shared non-static inline helpers: see dot_avx2_int.cpp.
#include <immintrin.h>

#include "quant/avx2_common.h"
#include "quant/blocks_ext.h"
#include "quant/iq2_tables.h"
#include "quant/iq_grids.h"
#include "quant/kernels_ext.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

using avx2::dot32;
using avx2::dot_hi;
using avx2::dot_lo;
using avx2::h2f;
using avx2::hsum_i32;
using avx2::load32;
inline __m256i scaled(__m256i v, int s) { return _mm256_mullo_epi32(v, _mm256_set1_epi32(s)); }

// Byte k = 0xFF where bit k of bits is set, else 0.
inline __m256i bit_mask32(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                          3, 3, 3, 3, 3);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

// The two nibbles of 16 bytes: weights 0..15 = low nibbles, 16..31 = high nibbles.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

inline __m256i lookup16(const int8_t* table, __m256i idx) {
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, idx);
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// Q5_0 / Q5_1: the 5-bit codes of one block.
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(nibbles(qs), _mm256_and_si256(bit_mask32(load_u32(qh)), _mm256_set1_epi8(0x10)));
}

inline __m256i grid64x4(const uint64_t* grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return _mm256_set_epi64x(static_cast<long long>(grid[i3]), static_cast<long long>(grid[i2]),
                           static_cast<long long>(grid[i1]), static_cast<long long>(grid[i0]));
}

// Magnitudes with explicit sign bits (bit k of signs negates weight k).
inline __m256i apply_signs(__m256i mag, uint32_t signs) {
  return _mm256_sign_epi8(mag, _mm256_or_si256(bit_mask32(signs), _mm256_set1_epi8(1)));
}

inline uint32_t ksigns4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return ksigns_iq2xs[c0] | (static_cast<uint32_t>(ksigns_iq2xs[c1]) << 8) | (static_cast<uint32_t>(ksigns_iq2xs[c2]) << 16) |
         (static_cast<uint32_t>(ksigns_iq2xs[c3]) << 24);
}

}  // namespace

// ---------------------------------------------------------------- 32-weight blocks vs Q8_0

float vec_dot_q4_0_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i wv = _mm256_sub_epi8(nibbles(x[i].qs), _mm256_set1_epi8(8));
    const int sumi = hsum_i32(dot32(wv, load32(y[i].qs)));
    acc[i % kLanes] += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_0_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i wv = _mm256_sub_epi8(q5_codes(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
    const int sumi = hsum_i32(dot32(wv, load32(y[i].qs)));
    acc[i % kLanes] += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_1_q8_1_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const int sumi = hsum_i32(dot32(q5_codes(x[i].qs, x[i].qh), load32(y[i].qs)));
    const float dd = h2f(x[i].d) * h2f(y[i].d);
    acc[i % kLanes] += dd * static_cast<float>(sumi) + h2f(x[i].m) * h2f(y[i].s);
  }
  return fold_lanes8(acc);
}

float vec_dot_iq4_nl_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const int sumi = hsum_i32(dot32(lookup16(kvalues_iq4nl, nibbles(x[i].qs)), load32(y[i].qs)));
    acc[i % kLanes] += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_mxfp4_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const int sumi = hsum_i32(dot32(lookup16(kvalues_mxfp4, nibbles(x[i].qs)), load32(y[i].qs)));
    acc[i % kLanes] += static_cast<float>(sumi) * (e8m0_half(x[i].e) * h2f(y[i].d));
  }
  return fold_lanes8(acc);
}

// ---------------------------------------------------------------- K-quants vs Q8_K

float vec_dot_q3_K_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[16];
    q3k_scales(x[i].scales, sc);
    const __m256i hm = load32(x[i].hmask);
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load32(x[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        const __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * s)), m3);
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + s)));
        const __m256i unset = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
        const __m256i wv = _mm256_sub_epi8(q, _mm256_and_si256(unset, four));
        const __m256i a = load32(y[i].qs + 128 * h + 32 * s);
        isum = _mm256_add_epi32(isum, scaled(dot_lo(wv, a), sc[8 * h + 2 * s] - 32));
        isum = _mm256_add_epi32(isum, scaled(dot_hi(wv, a), sc[8 * h + 2 * s + 1] - 32));
      }
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_K_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  const __m256i m15 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const __m256i qh = load32(x[i].qh);
    __m256i isum = _mm256_setzero_si256();
    int summs = 0;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      q4k_scale_min(2 * c, x[i].scales, &sc0, &m0);
      q4k_scale_min(2 * c + 1, x[i].scales, &sc1, &m1);
      summs += m0 * (y[i].bsums[4 * c] + y[i].bsums[4 * c + 1]) + m1 * (y[i].bsums[4 * c + 2] + y[i].bsums[4 * c + 3]);
      const __m256i ql = load32(x[i].qs + 32 * c);
      const __m256i bit0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * c))), bit1 = _mm256_set1_epi8(static_cast<char>(2 << (2 * c)));
      const __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit0), bit0), b4);
      const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit1), bit1), b4);
      const __m256i w0 = _mm256_or_si256(_mm256_and_si256(ql, m15), h0);
      const __m256i w1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m15), h1);
      isum = _mm256_add_epi32(isum, scaled(dot32(w0, load32(y[i].qs + 64 * c)), sc0));
      isum = _mm256_add_epi32(isum, scaled(dot32(w1, load32(y[i].qs + 64 * c + 32)), sc1));
    }
    const float dall = y[i].d * h2f(x[i].d);
    const float dmin = y[i].d * h2f(x[i].dmin);
    acc[i % kLanes] += dall * static_cast<float>(hsum_i32(isum)) - dmin * static_cast<float>(summs);
  }
  return fold_lanes8(acc);
}

float vec_dot_q6_K_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  const __m256i m15 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i qh = load32(x[i].qh + 32 * half);
      const __m256i ql0 = load32(x[i].ql + 64 * half), ql1 = load32(x[i].ql + 64 * half + 32);
      for (int k = 0; k < 4; ++k) {
        const __m256i ql = k & 1 ? ql1 : ql0;
        const __m256i lo = k < 2 ? _mm256_and_si256(ql, m15) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m15);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m3);
        const __m256i wv = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), off);
        const __m256i a = load32(y[i].qs + 128 * half + 32 * k);
        isum = _mm256_add_epi32(isum, scaled(dot_lo(wv, a), x[i].scales[8 * half + 2 * k]));
        isum = _mm256_add_epi32(isum, scaled(dot_hi(wv, a), x[i].scales[8 * half + 2 * k + 1]));
      }
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return fold_lanes8(acc);
}

float vec_dot_iq4_xs_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = (((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
      const __m256i wv = lookup16(kvalues_iq4nl, nibbles(x[i].qs + 16 * ib));
      isum = _mm256_add_epi32(isum, scaled(dot32(wv, load32(y[i].qs + 32 * ib)), ls));
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return fold_lanes8(acc);
}

// ---------------------------------------------------------------- codebook formats vs Q8_K

float vec_dot_iq2_xs_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t* q = x[i].qs + 4 * ib;
      const __m256i mag = grid64x4(iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
      const __m256i wv = apply_signs(mag, ksigns4(q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9));
      const __m256i a = load32(y[i].qs + 32 * ib);
      isum = _mm256_add_epi32(isum, scaled(dot_lo(wv, a), 2 * (x[i].scales[ib] & 0xF) + 1));
      isum = _mm256_add_epi32(isum, scaled(dot_hi(wv, a), 2 * (x[i].scales[ib] >> 4) + 1));
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return 0.125f * fold_lanes8(acc);
}

float vec_dot_iq2_s_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = x[i].qs + 4 * ib;
      const uint32_t h = x[i].qh[ib];
      const __m256i mag = grid64x4(iq2s_grid, qs[0] | ((h << 8) & 0x300), qs[1] | ((h << 6) & 0x300),
                                   qs[2] | ((h << 4) & 0x300), qs[3] | ((h << 2) & 0x300));
      const __m256i wv = apply_signs(mag, load_u32(x[i].qs + kQK_K / 8 + 4 * ib));
      const __m256i a = load32(y[i].qs + 32 * ib);
      isum = _mm256_add_epi32(isum, scaled(dot_lo(wv, a), 2 * (x[i].scales[ib] & 0xF) + 1));
      isum = _mm256_add_epi32(isum, scaled(dot_hi(wv, a), 2 * (x[i].scales[ib] >> 4) + 1));
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return 0.125f * fold_lanes8(acc);
}

float vec_dot_iq3_xxs_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = x[i].qs + 8 * ib;
      const uint32_t aux = load_u32(x[i].qs + kQK_K / 4 + 4 * ib);
      const __m256i mag = _mm256_setr_epi32(
          static_cast<int>(iq3xxs_grid[q[0]]), static_cast<int>(iq3xxs_grid[q[1]]), static_cast<int>(iq3xxs_grid[q[2]]),
          static_cast<int>(iq3xxs_grid[q[3]]), static_cast<int>(iq3xxs_grid[q[4]]), static_cast<int>(iq3xxs_grid[q[5]]),
          static_cast<int>(iq3xxs_grid[q[6]]), static_cast<int>(iq3xxs_grid[q[7]]));
      const __m256i wv = apply_signs(mag, ksigns4(aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127));
      isum = _mm256_add_epi32(isum, scaled(dot32(wv, load32(y[i].qs + 32 * ib)), 2 * static_cast<int>(aux >> 28) + 1));
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return 0.25f * fold_lanes8(acc);
}

float vec_dot_iq3_s_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = x[i].qs + 8 * ib;
      const uint32_t h = x[i].qh[ib];
      int g[8];
      for (int k = 0; k < 8; ++k) g[k] = static_cast<int>(iq3s_grid[q[k] | (((h >> k) & 1) << 8)]);
      const __m256i mag = _mm256_setr_epi32(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
      const __m256i wv = apply_signs(mag, load_u32(x[i].signs + 4 * ib));
      const uint8_t s4 = x[i].scales[ib / 2];
      isum = _mm256_add_epi32(isum, scaled(dot32(wv, load32(y[i].qs + 32 * ib)), 1 + 2 * (ib % 2 ? s4 >> 4 : s4 & 0xF)));
    }
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * static_cast<float>(hsum_i32(isum));
  }
  return fold_lanes8(acc);
}

float vec_dot_iq1_s_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i vsumi = _mm256_setzero_si256(), vsumi1 = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = x[i].qs + 4 * ib;
      const uint32_t h = x[i].qh[ib];
      const __m256i wv = grid64x4(iq1s_grid, qs[0] | ((h & 7) << 8), qs[1] | (((h >> 3) & 7) << 8),
                                  qs[2] | (((h >> 6) & 7) << 8), qs[3] | (((h >> 9) & 7) << 8));
      const int ls = 2 * static_cast<int>((h >> 12) & 7) + 1;
      const __m256i a = load32(y[i].qs + 32 * ib);
      vsumi = _mm256_add_epi32(vsumi, scaled(dot32(wv, a), ls));
      vsumi1 = _mm256_add_epi32(vsumi1, scaled(dot32(ones, a), h & 0x8000 ? -ls : ls));
    }
    const float sumi = static_cast<float>(hsum_i32(vsumi)), sumi1 = static_cast<float>(hsum_i32(vsumi1));
    acc[i % kLanes] += (h2f(x[i].d) * y[i].d) * (sumi + kIq1Delta * sumi1);
  }
  return fold_lanes8(acc);
}

float vec_dot_iq1_m_q8_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];
    __builtin_memcpy(sc, x[i].scales, 8);
    __m256i vs1 = _mm256_setzero_si256(), vs2 = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = x[i].qs + 4 * ib;
      const uint8_t* qh = x[i].qh + 2 * ib;
      const __m256i wv = grid64x4(iq1s_grid, qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                                  qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700));
      // One signed byte per weight: the delta sign of its group of 8.
      const __m256i ds = _mm256_setr_epi64x(qh[0] & 0x08 ? -1ll : 0x0101010101010101ll, qh[0] & 0x80 ? -1ll : 0x0101010101010101ll,
                                            qh[1] & 0x08 ? -1ll : 0x0101010101010101ll, qh[1] & 0x80 ? -1ll : 0x0101010101010101ll);
      const int shift = 6 * (ib % 2);
      const int ls1 = 2 * ((sc[ib / 2] >> shift) & 7) + 1, ls2 = 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1;
      const __m256i a = load32(y[i].qs + 32 * ib);
      vs1 = _mm256_add_epi32(vs1, _mm256_add_epi32(scaled(dot_lo(wv, a), ls1), scaled(dot_hi(wv, a), ls2)));
      vs2 = _mm256_add_epi32(vs2, _mm256_add_epi32(scaled(dot_lo(ds, a), ls1), scaled(dot_hi(ds, a), ls2)));
    }
    const float d = h2f(iq1m_scale_bits(x[i].scales)) * y[i].d;
    acc[i % kLanes] += d * (static_cast<float>(hsum_i32(vs1)) + kIq1Delta * static_cast<float>(hsum_i32(vs2)));
  }
  return fold_lanes8(acc);
}

}  // namespace ds4::quant
