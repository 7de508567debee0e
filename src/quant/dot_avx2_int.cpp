// AVX2 integer dot products (Q8_0.Q8_0, Q2_K.Q8_K, Q4_K.Q8_K). Compiled with -mavx2 -mfma
// -mf16c and only called after a run-time CPU check (quant.cpp).
// Exactness contract: every integer partial sum is exact (no saturating step can overflow
// for any input bytes), and the float work per block is the scalar kernel's expression in
// the scalar kernel's order (lane_sum.h), so results equal the scalar kernels bit for bit.
// -ffp-contract=off keeps mul+add from fusing into FMA. No std:: or shared inline helpers are
// used here, so no AVX2-compiled copy of a common inline function can reach portable code.
#include <immintrin.h>

#include "quant/avx2_common.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

using avx2::hsum_i32;
inline float half_to_float(uint16_t h) { return avx2::h2f(h); }
// Sum of a[i]*b[i] for 32 signed bytes, as 8 int32 partial sums (exact for every byte pair).
inline __m256i dot32_i8(const int8_t* a, const int8_t* b) { return avx2::dot32(avx2::load32(a), avx2::load32(b)); }

// Lane k of the result = sum of all 8 lanes of v[k].
inline __m256i transpose_sum8(const __m256i v[8]) {
  const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i t1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i t3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);  // per 128-bit half: v0 v1 v2 v3
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);  // per 128-bit half: v4 v5 v6 v7
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

}  // namespace

namespace {

// The exact-for-every-byte version: bytes widened to int16 before multiplying.
float q8_0_dot_widened(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK8_0;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  // Eight blocks at a time: block i+k lands in lane k, which is lane (i+k) % 8 of the scalar.
  for (; i + kLanes <= nb; i += kLanes) {
    __m256i v[8];
    alignas(16) uint16_t dx[8], dy[8];
    for (int k = 0; k < 8; ++k) {
      v[k] = dot32_i8(x[i + k].qs, y[i + k].qs);
      dx[k] = x[i + k].d;
      dy[k] = y[i + k].d;
    }
    const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dx))),
                                    _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dy))));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(transpose_sum8(v)), dd));
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc);
  for (; i < nb; ++i) {
    const int sumi = hsum_i32(dot32_i8(x[i].qs, y[i].qs));
    const float dd = half_to_float(x[i].d) * half_to_float(y[i].d);
    lanes[i % kLanes] += static_cast<float>(sumi) * dd;
  }
  return fold_lanes8(lanes);
}

}  // namespace

// sign(a, w) * |w| per byte pair through maddubs: |w| <= 128 as an unsigned byte and a * sign(w)
// in -127..127, so pair sums stay within 2 * 128 * 127 < 32768 and every sum is exact, unless
// an activation byte is -128 (then a * sign(w) can wrap). Such rows (which the Q8_0 quantizer
// never writes) go back to the widening kernel.
float vec_dot_q8_0_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK8_0;
  const __m256i ones = _mm256_set1_epi16(1), m128 = _mm256_set1_epi8(-128);
  __m256i saw_min = _mm256_setzero_si256();
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  // Eight blocks at a time: block i+k lands in lane k, which is lane (i+k) % 8 of the scalar.
  for (; i + kLanes <= nb; i += kLanes) {
    // Decode streams weight rows from memory: fetch 2 KiB ahead (measured best of 0.5-4 KiB with
    // gemm_bench --stream: 8.3 -> 12 GB/s against a 15 GB/s plain read; prefetches
    // past the row's end land in the next row, which a matmul reads next; they never fault).
    const char* ahead = reinterpret_cast<const char*>(x + i) + 2048;
    for (int l = 0; l < 5; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    __m256i v[8];
    alignas(16) uint16_t dx[8], dy[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i wq = avx2::load32(x[i + k].qs), aq = avx2::load32(y[i + k].qs);
      saw_min = _mm256_or_si256(saw_min, _mm256_cmpeq_epi8(aq, m128));
      v[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(aq, wq)), ones);
      dx[k] = x[i + k].d;
      dy[k] = y[i + k].d;
    }
    const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dx))),
                                    _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dy))));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(transpose_sum8(v)), dd));
  }
  if (!_mm256_testz_si256(saw_min, saw_min)) return q8_0_dot_widened(w, act, n);
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc);
  for (; i < nb; ++i) {
    const int sumi = hsum_i32(dot32_i8(x[i].qs, y[i].qs));
    const float dd = half_to_float(x[i].d) * half_to_float(y[i].d);
    lanes[i % kLanes] += static_cast<float>(sumi) * dd;
  }
  return fold_lanes8(lanes);
}

namespace {

// Integer part of one Q2_K block: *isum lanes sum to sum_j sc_j * (q . q8)_j, *summs lanes
// to sum_j m_j * bsums_j. pair_mask p spreads scale byte 2p over the low 128 bits and 2p+1
// over the high 128 bits as int16, matching maddubs' layout (low half = first 16 of a 32-run).
// Written out in full (no inner loops, two accumulators): GCC kept the rolled loops with the
// codes stored to the stack and one dependent accumulator chain.
inline void q2_K_block_sums(const BlockQ2_K& x, const BlockQ8_K& y, const __m256i pair_mask[8], __m256i* isum,
                            __m256i* summs) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
  const __m256i scales = _mm256_and_si256(_mm256_broadcastsi128_si256(sc_bytes), m4);
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), _mm256_castsi256_si128(m4)));
  *summs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)), mins);
  const __m256i* q8 = reinterpret_cast<const __m256i*>(y.qs);
  // codes <= 3, |q8| <= 128: pair sums <= 768, no int16 saturation.
  auto term = [&](__m256i codes, int h, int s) {
    const __m256i p = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(q8 + 4 * h + s));
    return _mm256_madd_epi16(p, _mm256_shuffle_epi8(scales, pair_mask[4 * h + s]));
  };
  const __m256i q2a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  const __m256i q2b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32));
  __m256i acc0 = term(_mm256_and_si256(q2a, m3), 0, 0);
  __m256i acc1 = term(_mm256_and_si256(q2b, m3), 1, 0);
  acc0 = _mm256_add_epi32(acc0, term(_mm256_and_si256(_mm256_srli_epi16(q2a, 2), m3), 0, 1));
  acc1 = _mm256_add_epi32(acc1, term(_mm256_and_si256(_mm256_srli_epi16(q2b, 2), m3), 1, 1));
  acc0 = _mm256_add_epi32(acc0, term(_mm256_and_si256(_mm256_srli_epi16(q2a, 4), m3), 0, 2));
  acc1 = _mm256_add_epi32(acc1, term(_mm256_and_si256(_mm256_srli_epi16(q2b, 4), m3), 1, 2));
  acc0 = _mm256_add_epi32(acc0, term(_mm256_and_si256(_mm256_srli_epi16(q2a, 6), m3), 0, 3));
  acc1 = _mm256_add_epi32(acc1, term(_mm256_and_si256(_mm256_srli_epi16(q2b, 6), m3), 1, 3));
  *isum = _mm256_add_epi32(acc0, acc1);
}

// Integer part of one Q4_K block, as q2_K_block_sums. scale_mask k spreads byte k as int16.
inline void q4_K_block_sums(const BlockQ4_K& x, const BlockQ8_K& y, const __m256i scale_mask[8], __m256i* isum,
                            __m256i* summs) {
  // Unpack the eight 6-bit scales and mins four at a time with 32-bit masks (spec §4 layout).
  uint32_t u[3];
  __builtin_memcpy(u, x.scales, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  const __m128i sc_m = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                                      static_cast<int>(m_hi));
  const __m256i scales = _mm256_broadcastsi128_si256(sc_m);  // bytes 0..7 scales, 8..15 mins
  // mins as int16, each twice: bsums j pairs with min j/2.
  const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc_m, dup));
  *summs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)), mins);

  const __m256i m15 = _mm256_set1_epi8(0xF);
  // Written out (GCC kept the loop over the four 32-byte chunks rolled); two accumulators.
  auto chunk = [&](int c, __m256i* acc_lo, __m256i* acc_hi) {
    const __m256i q4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * c));
    const __m256i lo = _mm256_and_si256(q4, m15);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m15);
    const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c));
    const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * c + 32));
    // codes <= 15, |q8| <= 128: pair sums <= 3840, no int16 saturation.
    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), _mm256_shuffle_epi8(scales, scale_mask[2 * c]));
    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), _mm256_shuffle_epi8(scales, scale_mask[2 * c + 1]));
    *acc_lo = c == 0 ? p0 : _mm256_add_epi32(*acc_lo, p0);
    *acc_hi = c == 0 ? p1 : _mm256_add_epi32(*acc_hi, p1);
  };
  __m256i acc0, acc1;
  chunk(0, &acc0, &acc1);
  chunk(1, &acc0, &acc1);
  chunk(2, &acc0, &acc1);
  chunk(3, &acc0, &acc1);
  *isum = _mm256_add_epi32(acc0, acc1);
}

// Shared K-quant driver. Eight blocks at a time: their integer sums are transposed into
// lanes (block i+k -> lane k = (i+k) % 8) and the per-block float expression
// d8*d*isum - d8*dmin*summs is evaluated for all eight at once, with the same roundings as
// the scalar kernel. Leftover blocks take the scalar route into their lanes.
template <class Block, class BlockSums>
float k_quant_dot(const Block* x, const BlockQ8_K* y, int64_t nb, BlockSums block_sums) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= nb; i += kLanes) {
    // Rows streamed from memory (decode): fetch ahead as the Q8_0 kernel does (never faults).
    const char* ahead = reinterpret_cast<const char*>(x + i) + 2048;
    for (size_t l = 0; l < (8 * sizeof(Block) + 63) / 64; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    __m256i isum[8], summs[8];
    alignas(16) uint16_t xd[8], xm[8];
    alignas(32) float yd[8];
    for (int k = 0; k < 8; ++k) {
      block_sums(x[i + k], y[i + k], &isum[k], &summs[k]);
      xd[k] = x[i + k].d;
      xm[k] = x[i + k].dmin;
      yd[k] = y[i + k].d;
    }
    const __m256 d8 = _mm256_load_ps(yd);
    const __m256 dall = _mm256_mul_ps(d8, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(xd))));
    const __m256 dmin = _mm256_mul_ps(d8, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(xm))));
    const __m256 fi = _mm256_cvtepi32_ps(transpose_sum8(isum)), fm = _mm256_cvtepi32_ps(transpose_sum8(summs));
    acc = _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(dall, fi), _mm256_mul_ps(dmin, fm)));
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc);
  for (; i < nb; ++i) {
    __m256i isum, summs;
    block_sums(x[i], y[i], &isum, &summs);
    const float dall = y[i].d * half_to_float(x[i].d);
    const float dmin = y[i].d * half_to_float(x[i].dmin);
    lanes[i % kLanes] += dall * static_cast<float>(hsum_i32(isum)) - dmin * static_cast<float>(hsum_i32(summs));
  }
  return fold_lanes8(lanes);
}

}  // namespace

float vec_dot_q2_K_q8_K_avx2(const void* w, const void* act, int64_t n) {
  __m256i pair_mask[8];
  for (int p = 0; p < 8; ++p) {
    const char a = static_cast<char>(2 * p), b = static_cast<char>(2 * p + 1), z = -1;
    pair_mask[p] = _mm256_setr_epi8(a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z,
                                    b, z, b, z, b, z, b, z, b, z, b, z, b, z, b, z);
  }
  return k_quant_dot(static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(act), n / kQK_K,
                     [&pair_mask](const BlockQ2_K& x, const BlockQ8_K& y, __m256i* isum, __m256i* summs) {
                       q2_K_block_sums(x, y, pair_mask, isum, summs);
                     });
}

float vec_dot_q4_K_q8_K_avx2(const void* w, const void* act, int64_t n) {
  __m256i scale_mask[8];
  for (int k = 0; k < 8; ++k) {
    const char a = static_cast<char>(k), z = -1;
    scale_mask[k] = _mm256_setr_epi8(a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z,
                                     a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z);
  }
  return k_quant_dot(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(act), n / kQK_K,
                     [&scale_mask](const BlockQ4_K& x, const BlockQ8_K& y, __m256i* isum, __m256i* summs) {
                       q4_K_block_sums(x, y, scale_mask, isum, summs);
                     });
}

// Rows x tokens (kernels.h): the per-row kernel for each (row, token), tokens inner so that a
// row stays in L1 while every token passes over it.
void gemm_q2_K_avx2(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride, int64_t tokens,
                    float* y, int64_t y_stride, int64_t n) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < tokens; ++t)
      y[t * y_stride + r] = vec_dot_q2_K_q8_K_avx2(wb + static_cast<size_t>(r) * w_stride, ab + static_cast<size_t>(t) * act_stride, n);
}

}  // namespace ds4::quant
