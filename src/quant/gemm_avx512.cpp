// Blocked rows x tokens matrix products (AVX-512 F/BW/VL/DQ + VNNI) for Q8_0, Q2_K, Q4_K and
// IQ2_XXS weights. Compiled with the AVX-512 flags and called only after a run-time CPU check
// (quant.cpp), for batches of several tokens; a one-token product keeps the per-row kernels.
//
// Layout: 16 weight rows form a panel. Each super-block of the panel is decoded once into
// unsigned bytes interleaved by dword (byte 4g..4g+3 of row r at lane r of group g), so one
// VNNI vpdpbusd against 4 broadcast activation bytes advances the 16 row sums at once and no
// horizontal reduction is needed. The decoded panel then serves every token of the batch.
//
// Exactness contract (as dot_avx2_int.cpp): every integer partial sum is exact for every
// input byte (signed weights are stored as w + 128, and the exact 128 * sum(activations) is
// subtracted; vpdpbusd does not saturate), and the float work per (row, token, block) is the
// scalar kernel's expression in the scalar kernel's order (lane_sum.h for Q8_0 and Q2_K, one
// running sum for IQ2_XXS). So results equal the scalar kernels bit for bit. -ffp-contract=off
// keeps mul + add from fusing. No std:: or shared inline helpers are used here, so no
// AVX-512-compiled copy of a common inline function can reach portable code.
// Upper register state: GCC emits no vzeroupper in functions that take or pass __m512 by value,
// and a dirty upper state makes the SSE code that follows (glibc's exp wrapper, measured: 10x
// slower) pay for it, so the helpers that fold zmm arguments and the exported kernels end with
// _mm256_zeroupper().
// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsic headers
// as uninitialized (GCC bug 105593), at every inlined use; those are not reads of our data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <stdlib.h>

#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/iq2_xxs.h"
#include "quant/kernels.h"

namespace ds4::quant {

namespace {

constexpr int kPanel = 16;  // rows per panel = int32 lanes of a zmm

// Heap scratch owned by one kernel call (malloc'ed: the library functions are not inline).
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) {
    p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) __builtin_trap();
  }
  ~Scratch() { free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// out[g * 16 + r] = dword g of src[r] (8 dwords each) xor flip, for g < 8, r < 16.
inline void transpose16x8(const uint8_t* const src[kPanel], uint32_t* out, __m512i flip) {
  // z[k] holds rows (k, k + 4) for k < 4 and rows (k + 4, k + 8) for k >= 4, so the final
  // 128-bit shuffle puts rows 0..15 in natural order.
  __m512i z[8];
  #pragma GCC unroll 16
  for (int k = 0; k < 8; ++k) {
    const int lo = k < 4 ? k : k + 4, hi = lo + 4;
    z[k] = _mm512_inserti64x4(_mm512_zextsi256_si512(load256(src[lo])), load256(src[hi]), 1);
  }
  __m512i t[8];
  #pragma GCC unroll 16
  for (int k = 0; k < 2; ++k) {  // rows z[4k..4k+3]
    const __m512i a = z[4 * k], b = z[4 * k + 1], c = z[4 * k + 2], d = z[4 * k + 3];
    const __m512i ab_lo = _mm512_unpacklo_epi32(a, b), ab_hi = _mm512_unpackhi_epi32(a, b);
    const __m512i cd_lo = _mm512_unpacklo_epi32(c, d), cd_hi = _mm512_unpackhi_epi32(c, d);
    t[4 * k + 0] = _mm512_unpacklo_epi64(ab_lo, cd_lo);  // dwords 0 | 4 of each 128-bit lane pair
    t[4 * k + 1] = _mm512_unpackhi_epi64(ab_lo, cd_lo);  // 1 | 5
    t[4 * k + 2] = _mm512_unpacklo_epi64(ab_hi, cd_hi);  // 2 | 6
    t[4 * k + 3] = _mm512_unpackhi_epi64(ab_hi, cd_hi);  // 3 | 7
  }
  #pragma GCC unroll 16
  for (int g = 0; g < 4; ++g) {
    const __m512i u = t[g], v = t[4 + g];
    _mm512_store_si512(out + g * kPanel, _mm512_xor_si512(_mm512_shuffle_i32x4(u, v, 0x88), flip));
    _mm512_store_si512(out + (g + 4) * kPanel, _mm512_xor_si512(_mm512_shuffle_i32x4(u, v, 0xDD), flip));
  }
}

// transpose16x8 into registers: out[g] lane r = dword g of src[r].
inline void transpose16x8_regs(const uint8_t* const src[kPanel], __m512i out[8]) {
  __m512i z[8];
  #pragma GCC unroll 16
  for (int k = 0; k < 8; ++k) {
    const int lo = k < 4 ? k : k + 4, hi = lo + 4;
    z[k] = _mm512_inserti64x4(_mm512_zextsi256_si512(load256(src[lo])), load256(src[hi]), 1);
  }
  __m512i t[8];
  #pragma GCC unroll 16
  for (int k = 0; k < 2; ++k) {
    const __m512i a = z[4 * k], b = z[4 * k + 1], c = z[4 * k + 2], d = z[4 * k + 3];
    const __m512i ab_lo = _mm512_unpacklo_epi32(a, b), ab_hi = _mm512_unpackhi_epi32(a, b);
    const __m512i cd_lo = _mm512_unpacklo_epi32(c, d), cd_hi = _mm512_unpackhi_epi32(c, d);
    t[4 * k + 0] = _mm512_unpacklo_epi64(ab_lo, cd_lo);
    t[4 * k + 1] = _mm512_unpackhi_epi64(ab_lo, cd_lo);
    t[4 * k + 2] = _mm512_unpacklo_epi64(ab_hi, cd_hi);
    t[4 * k + 3] = _mm512_unpackhi_epi64(ab_hi, cd_hi);
  }
  #pragma GCC unroll 16
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm512_shuffle_i32x4(t[g], t[4 + g], 0x88);
    out[g + 4] = _mm512_shuffle_i32x4(t[g], t[4 + g], 0xDD);
  }
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) per row lane (lane_sum.h).
inline __m512 fold8(const __m512 l[8]) {
  const __m512 a0 = _mm512_add_ps(l[0], l[4]), a1 = _mm512_add_ps(l[1], l[5]);
  const __m512 a2 = _mm512_add_ps(l[2], l[6]), a3 = _mm512_add_ps(l[3], l[7]);
  return _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
}

inline void store_rows(float* y, __m512 v, int64_t rows) {
  const __mmask16 m = rows >= kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1);
  _mm512_mask_storeu_ps(y, m, v);
}

inline __m512i bcast32(const void* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 128 * (sum of the 32 quants of a sub-block): sad(y ^ 0x80, 0) - 32 * 128. Computed from the
// quants, not from bsums, so that any activation bytes give the scalar kernel's result.
inline int32_t sum128_32(const int8_t* q) {
  const __m256i u = _mm256_xor_si256(load256(q), _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>((_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128) * 128);
}

// 8 dwords of u8 weights (group stride 16 dwords) against 32 activation bytes.
inline __m512i dot32(const uint32_t* wq, const int8_t* a) {
  __m512i s = _mm512_setzero_si512();
  #pragma GCC unroll 16
  for (int g = 0; g < 8; ++g)
    s = _mm512_dpbusd_epi32(s, _mm512_load_si512(wq + g * kPanel), bcast32(a + 4 * g));
  return s;
}

const uint8_t kZeroRow[256] = {};

// ---------------------------------------------------------------- Q8_0 -----------------
// Panel block b: 8 groups x 16 lanes of (w + 128) bytes, then 16 float scales.
constexpr int kQ8PanelBlockWords = 8 * kPanel + kPanel;

void q8_0_pack(const BlockQ8_0* const rowp[kPanel], int64_t nb, uint32_t* panel) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t* pb = panel + b * kQ8PanelBlockWords;
    const uint8_t* src[kPanel];
    float* dx = reinterpret_cast<float*>(pb + 8 * kPanel);
    for (int r = 0; r < kPanel; ++r) {
      if (rowp[r]) {
        src[r] = reinterpret_cast<const uint8_t*>(rowp[r][b].qs);
        dx[r] = f16_to_f32(rowp[r][b].d);
      } else {
        src[r] = kZeroRow;  // padding row: zero weights and scale, never stored
        dx[r] = 0.0f;
      }
    }
    transpose16x8(src, pb, flip);
  }
}

// Per activation block: the f16 scale as float and 128 * (sum of the 32 quants).
struct ActQ8_0 {
  float d;
  int32_t sum128;
};

void q8_0_act_aux(const uint8_t* act, size_t as, int64_t tokens, int64_t nb, ActQ8_0* aux) {
  for (int64_t t = 0; t < tokens; ++t) {
    const auto* y = reinterpret_cast<const BlockQ8_0*>(act + t * as);
    for (int64_t b = 0; b < nb; ++b) aux[t * nb + b] = {f16_to_f32(y[b].d), sum128_32(y[b].qs)};
  }
}

template <int L>
inline void q8_0_step(const uint32_t* pb, const uint8_t* a0, const ActQ8_0& x0, __m512* acc0) {
  const __m512i dp = _mm512_sub_epi32(dot32(pb, reinterpret_cast<const int8_t*>(a0)), _mm512_set1_epi32(x0.sum128));
  const __m512 dd = _mm512_mul_ps(_mm512_load_ps(reinterpret_cast<const float*>(pb + 8 * kPanel)), _mm512_set1_ps(x0.d));
  acc0[L] = _mm512_add_ps(acc0[L], _mm512_mul_ps(_mm512_cvtepi32_ps(dp), dd));
}

template <int L>
inline void q8_0_steps(const uint32_t* panel, int64_t b, const uint8_t* act, const ActQ8_0* aux, __m512* acc) {
  const int64_t bb = b + L;
  q8_0_step<L>(panel + bb * kQ8PanelBlockWords, act + bb * sizeof(BlockQ8_0) + 2, aux[bb], acc);
}

void q8_0_panel_token(const uint32_t* panel, int64_t nb, const uint8_t* act, const ActQ8_0* aux, float* y,
                      int64_t rows) {
  __m512 acc[8];
  #pragma GCC unroll 16
  for (auto& a : acc) a = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    q8_0_steps<0>(panel, b, act, aux, acc);
    q8_0_steps<1>(panel, b, act, aux, acc);
    q8_0_steps<2>(panel, b, act, aux, acc);
    q8_0_steps<3>(panel, b, act, aux, acc);
    q8_0_steps<4>(panel, b, act, aux, acc);
    q8_0_steps<5>(panel, b, act, aux, acc);
    q8_0_steps<6>(panel, b, act, aux, acc);
    q8_0_steps<7>(panel, b, act, aux, acc);
  }
  const int64_t rem = nb - b;  // block b + j lands in lane j (b is a multiple of 8)
  if (rem > 0) q8_0_steps<0>(panel, b, act, aux, acc);
  if (rem > 1) q8_0_steps<1>(panel, b, act, aux, acc);
  if (rem > 2) q8_0_steps<2>(panel, b, act, aux, acc);
  if (rem > 3) q8_0_steps<3>(panel, b, act, aux, acc);
  if (rem > 4) q8_0_steps<4>(panel, b, act, aux, acc);
  if (rem > 5) q8_0_steps<5>(panel, b, act, aux, acc);
  if (rem > 6) q8_0_steps<6>(panel, b, act, aux, acc);
  store_rows(y, fold8(acc), rows);
}

// One token (decode): each block of the 16 rows is transposed in registers and used at once,
// with no panel in memory; the rows are prefetched a few blocks ahead (one stream per row).
// Same operations per (row, block) as q8_0_step, so the same floats.
template <int L>
inline void q8_0_direct_step(const BlockQ8_0* const rowp[kPanel], int64_t b, const uint8_t* act, const ActQ8_0* aux,
                             __m512* acc) {
  const int64_t bb = b + L;
  const uint8_t* src[kPanel];
  alignas(64) float dx[kPanel];
#pragma GCC unroll 16
  for (int r = 0; r < kPanel; ++r) {
    src[r] = reinterpret_cast<const uint8_t*>(rowp[r][bb].qs);
    dx[r] = f16_to_f32(rowp[r][bb].d);
    if (L % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(rowp[r] + bb + 8), _MM_HINT_T0);
  }
  __m512i wq[8];
  transpose16x8_regs(src, wq);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* a = reinterpret_cast<const int8_t*>(act + bb * sizeof(BlockQ8_0) + 2);
  __m512i sdot = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int g = 0; g < 8; ++g) sdot = _mm512_dpbusd_epi32(sdot, _mm512_xor_si512(wq[g], flip), bcast32(a + 4 * g));
  const __m512i dp = _mm512_sub_epi32(sdot, _mm512_set1_epi32(aux[bb].sum128));
  const __m512 dd = _mm512_mul_ps(_mm512_load_ps(dx), _mm512_set1_ps(aux[bb].d));
  acc[L] = _mm512_add_ps(acc[L], _mm512_mul_ps(_mm512_cvtepi32_ps(dp), dd));
}

void q8_0_direct_token(const BlockQ8_0* const rowp[kPanel], int64_t nb, const uint8_t* act, const ActQ8_0* aux, float* y,
                       int64_t rows) {
  __m512 acc[8];
#pragma GCC unroll 16
  for (auto& a : acc) a = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    q8_0_direct_step<0>(rowp, b, act, aux, acc);
    q8_0_direct_step<1>(rowp, b, act, aux, acc);
    q8_0_direct_step<2>(rowp, b, act, aux, acc);
    q8_0_direct_step<3>(rowp, b, act, aux, acc);
    q8_0_direct_step<4>(rowp, b, act, aux, acc);
    q8_0_direct_step<5>(rowp, b, act, aux, acc);
    q8_0_direct_step<6>(rowp, b, act, aux, acc);
    q8_0_direct_step<7>(rowp, b, act, aux, acc);
  }
  const int64_t rem = nb - b;
  if (rem > 0) q8_0_direct_step<0>(rowp, b, act, aux, acc);
  if (rem > 1) q8_0_direct_step<1>(rowp, b, act, aux, acc);
  if (rem > 2) q8_0_direct_step<2>(rowp, b, act, aux, acc);
  if (rem > 3) q8_0_direct_step<3>(rowp, b, act, aux, acc);
  if (rem > 4) q8_0_direct_step<4>(rowp, b, act, aux, acc);
  if (rem > 5) q8_0_direct_step<5>(rowp, b, act, aux, acc);
  if (rem > 6) q8_0_direct_step<6>(rowp, b, act, aux, acc);
  store_rows(y, fold8(acc), rows);
}

// Two tokens per pass: each weight group is loaded into a register once for both.
template <int L>
inline void q8_0_step2(const uint32_t* panel, int64_t b, const uint8_t* act0, const uint8_t* act1, const ActQ8_0* aux0,
                       const ActQ8_0* aux1, __m512* acc0, __m512* acc1) {
  const int64_t bb = b + L;
  const uint32_t* pb = panel + bb * kQ8PanelBlockWords;
  const int8_t* a0 = reinterpret_cast<const int8_t*>(act0 + bb * sizeof(BlockQ8_0) + 2);
  const int8_t* a1 = reinterpret_cast<const int8_t*>(act1 + bb * sizeof(BlockQ8_0) + 2);
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int g = 0; g < 8; ++g) {
    const __m512i wg = _mm512_load_si512(pb + g * kPanel);
    s0 = _mm512_dpbusd_epi32(s0, wg, bcast32(a0 + 4 * g));
    s1 = _mm512_dpbusd_epi32(s1, wg, bcast32(a1 + 4 * g));
  }
  const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(pb + 8 * kPanel));
  const __m512i d0 = _mm512_sub_epi32(s0, _mm512_set1_epi32(aux0[bb].sum128));
  const __m512i d1 = _mm512_sub_epi32(s1, _mm512_set1_epi32(aux1[bb].sum128));
  acc0[L] = _mm512_add_ps(acc0[L], _mm512_mul_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(dx, _mm512_set1_ps(aux0[bb].d))));
  acc1[L] = _mm512_add_ps(acc1[L], _mm512_mul_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(dx, _mm512_set1_ps(aux1[bb].d))));
}

void q8_0_panel_token2(const uint32_t* panel, int64_t nb, const uint8_t* act0, const uint8_t* act1, const ActQ8_0* aux0,
                       const ActQ8_0* aux1, float* y0, float* y1, int64_t rows) {
  __m512 acc0[8], acc1[8];
#pragma GCC unroll 16
  for (int l = 0; l < 8; ++l) acc0[l] = acc1[l] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    q8_0_step2<0>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<1>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<2>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<3>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<4>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<5>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<6>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
    q8_0_step2<7>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  }
  const int64_t rem = nb - b;
  if (rem > 0) q8_0_step2<0>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 1) q8_0_step2<1>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 2) q8_0_step2<2>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 3) q8_0_step2<3>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 4) q8_0_step2<4>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 5) q8_0_step2<5>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  if (rem > 6) q8_0_step2<6>(panel, b, act0, act1, aux0, aux1, acc0, acc1);
  store_rows(y0, fold8(acc0), rows);
  store_rows(y1, fold8(acc1), rows);
}

// ---------------------------------------------------------------- Q2_K -----------------
// Panel super-block: 64 groups of u8 (scale * code, <= 45), 8 groups of int16 min pairs,
// then d and dmin as floats.
constexpr int kQ2PanelWords = 64 * kPanel + 8 * kPanel + 2 * kPanel;

// Row super-block -> 256 weight bytes (scale * code) then 8 dwords of min pairs
// (m_{2i} | m_{2i+1} << 16), 288 bytes: the panel transposes both alike.
constexpr int kDecBytes = 256 + 32;

void q2_K_decode_row(const BlockQ2_K& x, uint8_t* out) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
  const __m128i m4 = _mm_set1_epi8(0xF);
  // dword j = bytes (0, s_j, 2 s_j, 3 s_j): the pshufb table of codes 0..3 (3 s_j <= 45).
  const __m512i prod = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(sc, m4)), _mm512_set1_epi32(0x03020100));
  const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 16
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load256(x.qs + 32 * h);
#pragma GCC unroll 16
    for (int s = 0; s < 4; ++s) {
      const int k = 4 * h + s;  // elements 32k.. use scales 2k (first 16) and 2k + 1
      const __m256i tbl = _mm512_castsi512_si256(
          _mm512_permutexvar_epi32(_mm512_setr_epi32(2 * k, 0, 0, 0, 2 * k + 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), prod));
      const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * k), _mm256_shuffle_epi8(tbl, codes));
    }
  }
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 256), mins);
}

void q2_K_pack(const BlockQ2_K* const rowp[kPanel], int64_t nb, uint32_t* panel) {
  alignas(64) uint8_t dec[kPanel][kDecBytes];
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t* pb = panel + b * kQ2PanelWords;
    float* d = reinterpret_cast<float*>(pb + 72 * kPanel);
    for (int r = 0; r < kPanel; ++r) {
      if (rowp[r]) {
        q2_K_decode_row(rowp[r][b], dec[r]);
        d[r] = f16_to_f32(rowp[r][b].d);
        d[kPanel + r] = f16_to_f32(rowp[r][b].dmin);
      } else {
        __builtin_memset(dec[r], 0, kDecBytes);  // padding row: zero weights, mins and scales
        d[r] = d[kPanel + r] = 0.0f;
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < 9; ++c) {  // 8 weight groups, then the mins (pb + 64 * kPanel)
      const uint8_t* src[kPanel];
#pragma GCC unroll 16
      for (int r = 0; r < kPanel; ++r) src[r] = dec[r] + 32 * c;
      transpose16x8(src, pb + c * 8 * kPanel, _mm512_setzero_si512());
    }
  }
}

template <int L>
inline void q2_K_step(const uint32_t* panel, int64_t b, const BlockQ8_K* y, __m512* acc) {
  const int64_t bb = b + L;
  const uint32_t* pb = panel + bb * kQ2PanelWords;
  const BlockQ8_K& a = y[bb];
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  #pragma GCC unroll 16
  for (int c = 0; c < 8; c += 2) {
    s0 = _mm512_add_epi32(s0, dot32(pb + c * 8 * kPanel, a.qs + 32 * c));
    s1 = _mm512_add_epi32(s1, dot32(pb + (c + 1) * 8 * kPanel, a.qs + 32 * (c + 1)));
  }
  const __m512i isum = _mm512_add_epi32(s0, s1);
  __m512i summs = _mm512_setzero_si512();
  const uint32_t* mins = pb + 64 * kPanel;
  #pragma GCC unroll 16
  for (int i = 0; i < 8; ++i)
    summs = _mm512_dpwssd_epi32(summs, _mm512_load_si512(mins + i * kPanel), bcast32(a.bsums + 2 * i));
  const float* d = reinterpret_cast<const float*>(pb + 72 * kPanel);
  const __m512 yd = _mm512_set1_ps(a.d);
  const __m512 dall = _mm512_mul_ps(yd, _mm512_load_ps(d));
  const __m512 dmin = _mm512_mul_ps(yd, _mm512_load_ps(d + kPanel));
  const __m512 v = _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(isum)), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summs)));
  acc[L] = _mm512_add_ps(acc[L], v);
}

void q2_K_panel_token(const uint32_t* panel, int64_t nb, const uint8_t* act, float* y, int64_t rows) {
  const auto* a = reinterpret_cast<const BlockQ8_K*>(act);
  __m512 acc[8];
  #pragma GCC unroll 16
  for (auto& v : acc) v = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    q2_K_step<0>(panel, b, a, acc);
    q2_K_step<1>(panel, b, a, acc);
    q2_K_step<2>(panel, b, a, acc);
    q2_K_step<3>(panel, b, a, acc);
    q2_K_step<4>(panel, b, a, acc);
    q2_K_step<5>(panel, b, a, acc);
    q2_K_step<6>(panel, b, a, acc);
    q2_K_step<7>(panel, b, a, acc);
  }
  const int64_t rem = nb - b;
  if (rem > 0) q2_K_step<0>(panel, b, a, acc);
  if (rem > 1) q2_K_step<1>(panel, b, a, acc);
  if (rem > 2) q2_K_step<2>(panel, b, a, acc);
  if (rem > 3) q2_K_step<3>(panel, b, a, acc);
  if (rem > 4) q2_K_step<4>(panel, b, a, acc);
  if (rem > 5) q2_K_step<5>(panel, b, a, acc);
  if (rem > 6) q2_K_step<6>(panel, b, a, acc);
  store_rows(y, fold8(acc), rows);
}

// Two tokens per pass: each weight group and min pair is loaded once for both.
template <int L>
inline void q2_K_step2(const uint32_t* panel, int64_t b, const BlockQ8_K* y0, const BlockQ8_K* y1, __m512* acc0,
                       __m512* acc1) {
  const int64_t bb = b + L;
  const uint32_t* pb = panel + bb * kQ2PanelWords;
  const BlockQ8_K& a0 = y0[bb];
  const BlockQ8_K& a1 = y1[bb];
  __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
#pragma GCC unroll 64
  for (int g = 0; g < 64; ++g) {
    const __m512i wg = _mm512_load_si512(pb + g * kPanel);
    i0 = _mm512_dpbusd_epi32(i0, wg, bcast32(a0.qs + 4 * g));
    i1 = _mm512_dpbusd_epi32(i1, wg, bcast32(a1.qs + 4 * g));
  }
  __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
  const uint32_t* mins = pb + 64 * kPanel;
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    const __m512i mp = _mm512_load_si512(mins + i * kPanel);
    m0 = _mm512_dpwssd_epi32(m0, mp, bcast32(a0.bsums + 2 * i));
    m1 = _mm512_dpwssd_epi32(m1, mp, bcast32(a1.bsums + 2 * i));
  }
  const float* d = reinterpret_cast<const float*>(pb + 72 * kPanel);
  const __m512 dx = _mm512_load_ps(d), dm = _mm512_load_ps(d + kPanel);
  const __m512 yd0 = _mm512_set1_ps(a0.d), yd1 = _mm512_set1_ps(a1.d);
  const __m512 v0 = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd0, dx), _mm512_cvtepi32_ps(i0)),
                                  _mm512_mul_ps(_mm512_mul_ps(yd0, dm), _mm512_cvtepi32_ps(m0)));
  const __m512 v1 = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd1, dx), _mm512_cvtepi32_ps(i1)),
                                  _mm512_mul_ps(_mm512_mul_ps(yd1, dm), _mm512_cvtepi32_ps(m1)));
  acc0[L] = _mm512_add_ps(acc0[L], v0);
  acc1[L] = _mm512_add_ps(acc1[L], v1);
}

void q2_K_panel_token2(const uint32_t* panel, int64_t nb, const uint8_t* act0, const uint8_t* act1, float* y0, float* y1,
                       int64_t rows) {
  const auto* a0 = reinterpret_cast<const BlockQ8_K*>(act0);
  const auto* a1 = reinterpret_cast<const BlockQ8_K*>(act1);
  __m512 acc0[8], acc1[8];
#pragma GCC unroll 16
  for (int l = 0; l < 8; ++l) acc0[l] = acc1[l] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    q2_K_step2<0>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<1>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<2>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<3>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<4>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<5>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<6>(panel, b, a0, a1, acc0, acc1);
    q2_K_step2<7>(panel, b, a0, a1, acc0, acc1);
  }
  const int64_t rem = nb - b;
  if (rem > 0) q2_K_step2<0>(panel, b, a0, a1, acc0, acc1);
  if (rem > 1) q2_K_step2<1>(panel, b, a0, a1, acc0, acc1);
  if (rem > 2) q2_K_step2<2>(panel, b, a0, a1, acc0, acc1);
  if (rem > 3) q2_K_step2<3>(panel, b, a0, a1, acc0, acc1);
  if (rem > 4) q2_K_step2<4>(panel, b, a0, a1, acc0, acc1);
  if (rem > 5) q2_K_step2<5>(panel, b, a0, a1, acc0, acc1);
  if (rem > 6) q2_K_step2<6>(panel, b, a0, a1, acc0, acc1);
  store_rows(y0, fold8(acc0), rows);
  store_rows(y1, fold8(acc1), rows);
}

// ------------------------------------------------------------- IQ2_XXS -----------------
// Panel super-block: 64 groups of (signed grid value + 128) bytes, 8 groups of int32
// sub-block scales 2s+1, then d as floats.
constexpr int kIq2PanelWords = 64 * kPanel + 8 * kPanel + kPanel;

// Row super-block -> 256 bytes (signed grid value + 128) then 8 dwords of sub-block scales
// 2s + 1 (kDecBytes in all).
void iq2_xxs_decode_row(const BlockIQ2_XXS& x, uint8_t* out) {
  // Sub-block j: grid indices (one byte each) in dword 2j of qs, signs + scale in dword 2j + 1.
  const __m512i q = _mm512_loadu_si512(x.qs);
  const __m256i a0 = _mm512_castsi512_si256(
      _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0), q));
  const __m256i a1 = _mm512_castsi512_si256(
      _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0), q));
  // Four 7-bit sign codes per sub-block, each completed to even parity (ksigns_iq2xs): byte l
  // of dword j = the signs of group l of sub-block j (bit k set: weight k negative).
  const __m256i m7 = _mm256_set1_epi32(127);
  __m256i sg = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (int l = 0; l < 4; ++l) {
    const __m256i c = _mm256_and_si256(_mm256_srli_epi32(a1, 7 * l), m7);
    __m256i p = _mm256_xor_si256(c, _mm256_srli_epi32(c, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    const __m256i code = _mm256_or_si256(c, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(1)), 7));
    sg = _mm256_or_si256(sg, _mm256_slli_epi32(code, 8 * l));
  }
  const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(a1, 28), 1), _mm256_set1_epi32(1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 256), ls);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const auto* grid = reinterpret_cast<const long long*>(iq2xxs_grid);
  alignas(32) uint64_t idx[4], msk[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(idx), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(msk), sg);
#pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {  // sub-blocks 2c, 2c+1: 8 groups, 64 weights
    const __m512i g = _mm512_i64gather_epi64(_mm512_cvtepu8_epi64(_mm_cvtsi64_si128(static_cast<long long>(idx[c]))), grid, 8);
    // 128 + g, or 128 - g where the weight's sign bit is set (exact bytes: g <= 43).
    const __m512i v = _mm512_mask_sub_epi8(_mm512_add_epi8(bias, g), static_cast<__mmask64>(msk[c]), bias, g);
    _mm512_storeu_si512(out + 64 * c, v);
  }
}

void iq2_xxs_pack(const BlockIQ2_XXS* const rowp[kPanel], int64_t nb, uint32_t* panel) {
  alignas(64) uint8_t dec[kPanel][kDecBytes];
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t* pb = panel + b * kIq2PanelWords;
    float* d = reinterpret_cast<float*>(pb + 72 * kPanel);
    for (int r = 0; r < kPanel; ++r) {
      if (rowp[r]) {
        iq2_xxs_decode_row(rowp[r][b], dec[r]);
        d[r] = f16_to_f32(rowp[r][b].d);
      } else {
        __builtin_memset(dec[r], 0x80, 256);  // value 0 after the -128 bias
        __builtin_memset(dec[r] + 256, 0, 32);  // and scale 0
        d[r] = 0.0f;
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < 9; ++c) {  // 8 weight groups, then the scales (pb + 64 * kPanel)
      const uint8_t* src[kPanel];
#pragma GCC unroll 16
      for (int r = 0; r < kPanel; ++r) src[r] = dec[r] + 32 * c;
      transpose16x8(src, pb + c * 8 * kPanel, _mm512_setzero_si512());
    }
  }
}

void q8_K_sub_sums(const uint8_t* act, size_t as, int64_t tokens, int64_t nb, int32_t* out /*[t][b][8]*/) {
  for (int64_t t = 0; t < tokens; ++t) {
    const auto* y = reinterpret_cast<const BlockQ8_K*>(act + t * as);
    for (int64_t b = 0; b < nb; ++b)
      #pragma GCC unroll 16
      for (int j = 0; j < 8; ++j) out[(t * nb + b) * 8 + j] = sum128_32(y[b].qs + 32 * j);
  }
}

// T tokens per pass over the panel: each weight group is loaded once for all of them.
template <int T>
void iq2_xxs_panel_tokens(const uint32_t* panel, int64_t nb, const uint8_t* const act[T], const int32_t* const sub128[T],
                          float* const y[T], int64_t rows) {
  const BlockQ8_K* a[T];
  __m512 sumf[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
    sumf[t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t* pb = panel + b * kIq2PanelWords;
    const uint32_t* ls = pb + 64 * kPanel;
    __m512i bsum[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) bsum[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      __m512i dp[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) dp[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int g = 0; g < 8; ++g) {
        const __m512i wg = _mm512_load_si512(pb + (8 * j + g) * kPanel);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) dp[t] = _mm512_dpbusd_epi32(dp[t], wg, bcast32(a[t][b].qs + 32 * j + 4 * g));
      }
      const __m512i lsj = _mm512_load_si512(ls + j * kPanel);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t)
        bsum[t] = _mm512_add_epi32(bsum[t], _mm512_mullo_epi32(_mm512_sub_epi32(dp[t], _mm512_set1_epi32(sub128[t][b * 8 + j])), lsj));
    }
    const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(pb + 72 * kPanel));
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      sumf[t] = _mm512_add_ps(sumf[t], _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(a[t][b].d)), _mm512_cvtepi32_ps(bsum[t])));
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) store_rows(y[t], _mm512_mul_ps(_mm512_set1_ps(0.125f), sumf[t]), rows);
}

template <int T>
void iq2_xxs_run(const uint32_t* panel, int64_t nb, const uint8_t* a, size_t as, const int32_t* sub, int64_t t0, float* y,
                 int64_t ys, int64_t r0, int64_t rows) {
  const uint8_t* act[T];
  const int32_t* s[T];
  float* out[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    act[t] = a + (t0 + t) * as;
    s[t] = sub + (t0 + t) * nb * 8;
    out[t] = y + (t0 + t) * ys + r0;
  }
  iq2_xxs_panel_tokens<T>(panel, nb, act, s, out, rows);
}

// ---------------------------------------------------------------- Q4_K -----------------
// Panel super-block: 64 groups of u8 codes (0..15), 8 groups of int32 sub-block scales (6-bit),
// 8 groups of int16 min pairs (m_j | m_j << 16), then d and dmin as floats. The codes are
// unsigned and the activations signed, which is what vpdpbusd multiplies, so no bias is needed:
// each sub-block's 32-product sum is exact, then scaled by its 6-bit scale in int32 (at most
// 8 * 63 * 32 * 15 * 128 in magnitude, so isum is the scalar kernel's int exactly).
constexpr int kQ4PanelWords = 64 * kPanel + 16 * kPanel + 2 * kPanel;
constexpr int kQ4DecBytes = 256 + 64;

// Row super-block -> 256 code bytes in element order (sub-block j = low nibbles of qs[32 (j/2)..]
// for even j, high nibbles for odd j), 8 dwords of scales, 8 dwords of min pairs.
void q4_K_decode_row(const BlockQ4_K& x, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
#pragma GCC unroll 16
  for (int p = 0; p < 4; ++p) {
    const __m256i q = load256(x.qs + 32 * p);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * p), _mm256_and_si256(q, m4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * p + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
  }
  uint32_t sm[16];
#pragma GCC unroll 16
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, x.scales, &sc, &m);
    sm[j] = sc;
    sm[8 + j] = static_cast<uint32_t>(m) | (static_cast<uint32_t>(m) << 16);
  }
  __builtin_memcpy(out + 256, sm, sizeof(sm));
}

void q4_K_pack(const BlockQ4_K* const rowp[kPanel], int64_t nb, uint32_t* panel) {
  alignas(64) uint8_t dec[kPanel][kQ4DecBytes];
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t* pb = panel + b * kQ4PanelWords;
    float* d = reinterpret_cast<float*>(pb + 80 * kPanel);
    for (int r = 0; r < kPanel; ++r) {
      if (rowp[r]) {
        q4_K_decode_row(rowp[r][b], dec[r]);
        d[r] = f16_to_f32(rowp[r][b].d);
        d[kPanel + r] = f16_to_f32(rowp[r][b].dmin);
      } else {
        __builtin_memset(dec[r], 0, kQ4DecBytes);  // padding row: zero codes, scales, mins
        d[r] = d[kPanel + r] = 0.0f;
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < 10; ++c) {  // 8 code groups, then scales (pb + 64 * kPanel), mins (+ 72)
      const uint8_t* src[kPanel];
#pragma GCC unroll 16
      for (int r = 0; r < kPanel; ++r) src[r] = dec[r] + 32 * c;
      transpose16x8(src, pb + c * 8 * kPanel, _mm512_setzero_si512());
    }
  }
}

// T tokens per pass over the panel: each code group, scale and min pair is loaded once for all
// of them. Super-block b's float goes to lane b % 8 of the token's accumulators (lane_sum.h).
template <int T>
void q4_K_panel_tokens(const uint32_t* panel, int64_t nb, const uint8_t* const act[T], float* const y[T],
                       int64_t rows) {
  const BlockQ8_K* a[T];
  __m512 acc[T][8];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act[t]);
#pragma GCC unroll 16
    for (int l = 0; l < 8; ++l) acc[t][l] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t* pb = panel + b * kQ4PanelWords;
    __m512i isum[T], summs[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) isum[t] = summs[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      __m512i dp[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) dp[t] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int g = 0; g < 8; ++g) {
        const __m512i wg = _mm512_load_si512(pb + (8 * j + g) * kPanel);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) dp[t] = _mm512_dpbusd_epi32(dp[t], wg, bcast32(a[t][b].qs + 32 * j + 4 * g));
      }
      const __m512i scj = _mm512_load_si512(pb + (64 + j) * kPanel);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dp[t], scj));
    }
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      const __m512i mp = _mm512_load_si512(pb + (72 + j) * kPanel);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) summs[t] = _mm512_dpwssd_epi32(summs[t], mp, bcast32(a[t][b].bsums + 2 * j));
    }
    const float* d = reinterpret_cast<const float*>(pb + 80 * kPanel);
    const __m512 dx = _mm512_load_ps(d), dm = _mm512_load_ps(d + kPanel);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 yd = _mm512_set1_ps(a[t][b].d);
      const __m512 v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd, dx), _mm512_cvtepi32_ps(isum[t])),
                                     _mm512_mul_ps(_mm512_mul_ps(yd, dm), _mm512_cvtepi32_ps(summs[t])));
      acc[t][b & 7] = _mm512_add_ps(acc[t][b & 7], v);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) store_rows(y[t], fold8(acc[t]), rows);
}

template <int T>
void q4_K_run(const uint32_t* panel, int64_t nb, const uint8_t* a, size_t as, int64_t t0, float* y, int64_t ys,
              int64_t r0, int64_t rows) {
  const uint8_t* act[T];
  float* out[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    act[t] = a + (t0 + t) * as;
    out[t] = y + (t0 + t) * ys + r0;
  }
  q4_K_panel_tokens<T>(panel, nb, act, out, rows);
}

// ------------------------------------------------------------------ driver -------------
template <class Block>
void panel_rows(const void* w, size_t ws, int64_t r0, int64_t rows, const Block* rowp[kPanel]) {
  #pragma GCC unroll 16
  for (int r = 0; r < kPanel; ++r)
    rowp[r] = r0 + r < rows ? reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + (r0 + r) * ws) : nullptr;
}

}  // namespace

void gemm_q8_0_avx512(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                      int64_t ys, int64_t n) {
  const int64_t nb = n / kQK8_0;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return;
  Scratch panel(static_cast<size_t>(nb) * kQ8PanelBlockWords * 4);
  Scratch aux(static_cast<size_t>(tokens * nb) * sizeof(ActQ8_0));
  const auto* a = static_cast<const uint8_t*>(act);
  q8_0_act_aux(a, as, tokens, nb, static_cast<ActQ8_0*>(aux.p));
  for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
    const BlockQ8_0* rowp[kPanel];
    panel_rows(w, ws, r0, rows, rowp);
    if (tokens == 1 && r0 + kPanel <= rows) {  // decode: no panel in memory
      q8_0_direct_token(rowp, nb, a, static_cast<const ActQ8_0*>(aux.p), y + r0, rows - r0);
      continue;
    }
    q8_0_pack(rowp, nb, static_cast<uint32_t*>(panel.p));
    const auto* pp = static_cast<const uint32_t*>(panel.p);
    const auto* ax = static_cast<const ActQ8_0*>(aux.p);
    int64_t t = 0;
    for (; t + 2 <= tokens; t += 2)
      q8_0_panel_token2(pp, nb, a + t * as, a + (t + 1) * as, ax + t * nb, ax + (t + 1) * nb, y + t * ys + r0,
                        y + (t + 1) * ys + r0, rows - r0);
    if (t < tokens) q8_0_panel_token(pp, nb, a + t * as, ax + t * nb, y + t * ys + r0, rows - r0);
  }
  _mm256_zeroupper();
}

void gemm_q2_K_avx512(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                      int64_t ys, int64_t n) {
  const int64_t nb = n / kQK_K;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return;
  Scratch panel(static_cast<size_t>(nb) * kQ2PanelWords * 4);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
    const BlockQ2_K* rowp[kPanel];
    panel_rows(w, ws, r0, rows, rowp);
    q2_K_pack(rowp, nb, static_cast<uint32_t*>(panel.p));
    const auto* pp = static_cast<const uint32_t*>(panel.p);
    int64_t t = 0;
    for (; t + 2 <= tokens; t += 2)
      q2_K_panel_token2(pp, nb, a + t * as, a + (t + 1) * as, y + t * ys + r0, y + (t + 1) * ys + r0, rows - r0);
    if (t < tokens) q2_K_panel_token(pp, nb, a + t * as, y + t * ys + r0, rows - r0);
  }
  _mm256_zeroupper();
}

void gemm_q4_K_avx512(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                      int64_t ys, int64_t n) {
  const int64_t nb = n / kQK_K;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return;
  Scratch panel(static_cast<size_t>(nb) * kQ4PanelWords * 4);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
    const BlockQ4_K* rowp[kPanel];
    panel_rows(w, ws, r0, rows, rowp);
    q4_K_pack(rowp, nb, static_cast<uint32_t*>(panel.p));
    const auto* pp = static_cast<const uint32_t*>(panel.p);
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) q4_K_run<4>(pp, nb, a, as, t, y, ys, r0, rows - r0);
    if (tokens - t >= 2) {
      q4_K_run<2>(pp, nb, a, as, t, y, ys, r0, rows - r0);
      t += 2;
    }
    if (t < tokens) q4_K_run<1>(pp, nb, a, as, t, y, ys, r0, rows - r0);
  }
  _mm256_zeroupper();
}

void gemm_iq2_xxs_avx512(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                         int64_t ys, int64_t n) {
  const int64_t nb = n / kIq2xxsBlockElems;
  if (rows <= 0 || tokens <= 0 || nb <= 0) return;
  Scratch panel(static_cast<size_t>(nb) * kIq2PanelWords * 4);
  Scratch sub(static_cast<size_t>(tokens * nb) * 8 * sizeof(int32_t));
  const auto* a = static_cast<const uint8_t*>(act);
  q8_K_sub_sums(a, as, tokens, nb, static_cast<int32_t*>(sub.p));
  for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
    const BlockIQ2_XXS* rowp[kPanel];
    panel_rows(w, ws, r0, rows, rowp);
    iq2_xxs_pack(rowp, nb, static_cast<uint32_t*>(panel.p));
    const auto* pp = static_cast<const uint32_t*>(panel.p);
    const auto* sp = static_cast<const int32_t*>(sub.p);
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) iq2_xxs_run<4>(pp, nb, a, as, sp, t, y, ys, r0, rows - r0);
    if (tokens - t >= 2) {
      iq2_xxs_run<2>(pp, nb, a, as, sp, t, y, ys, r0, rows - r0);
      t += 2;
    }
    if (t < tokens) iq2_xxs_run<1>(pp, nb, a, as, sp, t, y, ys, r0, rows - r0);
  }
  _mm256_zeroupper();
}

void axpy_f32_avx512(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, _mm512_loadu_ps(x + i))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 p = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), p));
  }
}

// As quantize_row_q8_0 (ggml's _ref rule), 16 floats at a time. roundf (ties away from zero)
// is truncation plus one step away from zero where the exact remainder is at least 1/2.
// x * (1/d) stays within [-127.00002, 127.00002] for finite rows, so the int8 narrowing is
// exact; when 1/d overflows (denormal amax) the products are inf/NaN and convert to
// 0x80000000, whose low byte 0 is what the scalar path stores too. Returns false when the row
// holds a non-finite value (the caller then reports it); the output is garbage in that case.
bool quantize_row_q8_0_avx512(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * i), x1 = _mm512_loadu_ps(x + 32 * i + 16);
    const __m512 a0 = _mm512_and_ps(x0, abs_mask), a1 = _mm512_and_ps(x1, abs_mask);
    bad |= _mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ);  // inf or NaN
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 vid = _mm512_set1_ps(id);
    __m512i q[2];
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m512 p = _mm512_mul_ps(h ? x1 : x0, vid);
      const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m512 frac = _mm512_and_ps(_mm512_sub_ps(p, t), abs_mask);
      const __mmask16 up = _mm512_cmp_ps_mask(frac, half, _CMP_GE_OQ);
      // t + copysign(1, p) where the remainder reaches 1/2
      const __m512 step = _mm512_or_ps(one, _mm512_andnot_ps(abs_mask, p));
      const __m512 r = _mm512_mask_add_ps(t, up, t, step);
      q[h] = _mm512_cvttps_epi32(r);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b[i].qs), _mm512_cvtepi32_epi8(q[0]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b[i].qs + 16), _mm512_cvtepi32_epi8(q[1]));
  }
  return bad == 0;
}

// ------------------------------------------------------------------ F16 ----------------
// vec_dot_f16_f32_avx2 keeps four 8-lane FMA chains a0..a3 over 32-element steps, then 8-element
// steps into a0, folds (a0 + a1) + (a2 + a3) and its 8 lanes as hsum_ps does, and adds the last
// n % 8 products one by one. Here a zmm holds a0 | a1 and another a2 | a3, with the same fused
// operations per lane in the same order, so the result is that kernel's float bit for bit.
// R rows x T tokens share each converted weight vector and each activation load; the length is
// cut into slices (the chains are saved between slices, which changes no operation) so that a
// block of tokens' activations and the rows' weights stay in cache.
namespace {

template <int V>
struct IntTag {
  static constexpr int value = V;
};

constexpr int kF16Tokens = 32;     // tokens per block
constexpr int64_t kF16Slice = 512;  // elements per slice (a multiple of 32)

// Chains of (row r, token t) at acc[(r * kF16Tokens + t) * 2 + {0: a0|a1, 1: a2|a3}].
template <int R, int T>
void f16_tile(const uint16_t* const w[R], const float* const x[T], int64_t i0, int64_t i1, __m512* acc) {
  __m512 a01[R][T], a23[R][T];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {  // the first slice starts the chains at zero
      a01[r][t] = i0 == 0 ? _mm512_setzero_ps() : acc[(r * kF16Tokens + t) * 2];
      a23[r][t] = i0 == 0 ? _mm512_setzero_ps() : acc[(r * kF16Tokens + t) * 2 + 1];
    }
  for (int64_t i = i0; i < i1; i += 32) {
    __m512 w0[R], w1[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      w0[r] = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + i)));
      w1[r] = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + i + 16)));
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 x0 = _mm512_loadu_ps(x[t] + i), x1 = _mm512_loadu_ps(x[t] + i + 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        a01[r][t] = _mm512_fmadd_ps(w0[r], x0, a01[r][t]);
        a23[r][t] = _mm512_fmadd_ps(w1[r], x1, a23[r][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      acc[(r * kF16Tokens + t) * 2] = a01[r][t];
      acc[(r * kF16Tokens + t) * 2 + 1] = a23[r][t];
    }
}

// The 8-element steps from i (into a0), the fold, and the scalar tail of one (row, token).
float f16_finish(const uint16_t* w, const float* x, int64_t i, int64_t n, __m512 a01, __m512 a23) {
  for (; i + 8 <= n; i += 8) {
    const __m512 wv = _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i))));
    const __m512 xv = _mm512_zextps256_ps512(_mm256_loadu_ps(x + i));
    a01 = _mm512_mask3_fmadd_ps(wv, xv, a01, 0x00FF);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(a01), _mm512_extractf32x8_ps(a01, 1)),
                                 _mm256_add_ps(_mm512_castps512_ps256(a23), _mm512_extractf32x8_ps(a23, 1)));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float sum = _mm_cvtss_f32(h);
  _mm256_zeroupper();  // GCC emits no vzeroupper in a function taking zmm arguments (see top)
  for (; i < n; ++i) {
    float p = _cvtsh_ss(w[i]) * x[i];
    __asm__("" : "+x"(p));
    sum += p;
  }
  return sum;
}

// f16_finish's fold for 16 (row, token) outputs at once when n is a multiple of 32 (no 8-element
// steps, no tail): the same additions per output on the same operands, with the outputs of a
// step packed into one register. c01[k], c23[k] are output k's chains; out[k] its float.
void f16_fold16(const __m512 c01[16], const __m512 c23[16], float out[16]) {
  __m512 s[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {  // s_k = (lo8(a01) + hi8(a01)) + (lo8(a23) + hi8(a23)), k = 2m, 2m + 1
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(c01[2 * m], c01[2 * m + 1], 0x44),
                                   _mm512_shuffle_f32x4(c01[2 * m], c01[2 * m + 1], 0xEE));
    const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(c23[2 * m], c23[2 * m + 1], 0x44),
                                   _mm512_shuffle_f32x4(c23[2 * m], c23[2 * m + 1], 0xEE));
    s[m] = _mm512_add_ps(u, v);
  }
  __m512 h[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)  // h = lo4(s) + hi4(s); 128-bit lane j of h[q] is output 4q + j
    h[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0xDD));
  __m512 g[2];
#pragma GCC unroll 2
  for (int q = 0; q < 2; ++q)  // [h0 + h2, h1 + h3]; lane j: outputs 8q + j (elements 0, 1), 8q + 4 + j (2, 3)
    g[q] = _mm512_add_ps(_mm512_shuffle_ps(h[2 * q], h[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(h[2 * q], h[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // (h0 + h2) + (h1 + h3); element e of lane j is output j + 4e.
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(64) float t[16];
  _mm512_store_ps(t, f);
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) out[k] = t[4 * (k % 4) + k / 4];
}

template <int R>
void f16_slice_rows(const uint8_t* wb, size_t ws, int64_t r0, const uint8_t* act, size_t as, int64_t t0, int64_t tn,
                    int64_t i0, int64_t i1, __m512* acc) {
  const uint16_t* w[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const uint16_t*>(wb + (r0 + r) * ws);
  auto run = [&](auto tag, int64_t t) {
    constexpr int T = decltype(tag)::value;
    const float* x[T];
#pragma GCC unroll 16
    for (int k = 0; k < T; ++k) x[k] = reinterpret_cast<const float*>(act + (t0 + t + k) * as);
    f16_tile<R, T>(w, x, i0, i1, acc + (r0 * kF16Tokens + t) * 2);
  };
  int64_t t = 0;
  for (; t + 4 <= tn; t += 4) run(IntTag<4>{}, t);
  switch (tn - t) {
    case 3: run(IntTag<3>{}, t); break;
    case 2: run(IntTag<2>{}, t); break;
    case 1: run(IntTag<1>{}, t); break;
    default: break;
  }
}

}  // namespace

void gemm_f16_avx512(const void* w, size_t ws, int64_t rows, const void* act, size_t as, int64_t tokens, float* y,
                     int64_t ys, int64_t n) {
  if (rows <= 0 || tokens <= 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const int64_t n32 = n / 32 * 32;
  Scratch accs(static_cast<size_t>(rows) * kF16Tokens * 2 * sizeof(__m512));
  auto* acc = static_cast<__m512*>(accs.p);
  for (int64_t t0 = 0; t0 < tokens; t0 += kF16Tokens) {
    const int64_t tn = tokens - t0 < kF16Tokens ? tokens - t0 : kF16Tokens;
    if (n32 == 0)  // no 32-element step: the chains stay zero (f16_tile never ran)
      for (int64_t k = 0; k < rows * kF16Tokens * 2; ++k) acc[k] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < n32; i0 += kF16Slice) {
      const int64_t i1 = n32 - i0 < kF16Slice ? n32 : i0 + kF16Slice;
      int64_t r = 0;
      for (; r + 2 <= rows; r += 2) f16_slice_rows<2>(wb, ws, r, ab, as, t0, tn, i0, i1, acc);
      if (r < rows) f16_slice_rows<1>(wb, ws, r, ab, as, t0, tn, i0, i1, acc);
    }
    for (int64_t r = 0; r < rows; ++r) {
      int64_t t = 0;
      if (n32 == n && n32 > 0)  // whole 32-element steps only: fold 16 tokens at a time
        for (; t + 16 <= tn; t += 16) {
          __m512 c01[16], c23[16];
#pragma GCC unroll 16
          for (int k = 0; k < 16; ++k) {
            c01[k] = acc[(r * kF16Tokens + t + k) * 2];
            c23[k] = acc[(r * kF16Tokens + t + k) * 2 + 1];
          }
          float out[16];
          f16_fold16(c01, c23, out);
#pragma GCC unroll 16
          for (int k = 0; k < 16; ++k) y[(t0 + t + k) * ys + r] = out[k];
        }
      for (; t < tn; ++t) {
        const __m512* a = acc + (r * kF16Tokens + t) * 2;
        y[(t0 + t) * ys + r] = f16_finish(reinterpret_cast<const uint16_t*>(wb + r * ws),
                                          reinterpret_cast<const float*>(ab + (t0 + t) * as), n32, n, a[0], a[1]);
      }
    }
  }
  _mm256_zeroupper();
}

// One row: vec_dot_f32_f32_avx2 / vec_dot_f16_f32_avx2 with a0 | a1 and a2 | a3 in two zmm
// (the same fused operations per lane, in the same order), so the same float bit for bit.
namespace {

// vec_dot_f32_f32_avx2 after its 32-element steps: the 8-element steps from i (into a0), the
// fold and the scalar tail.
float f32_finish(const float* wf, const float* xf, int64_t i, int64_t n, __m512 a01, __m512 a23) {
  for (; i + 8 <= n; i += 8)
    a01 = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(_mm256_loadu_ps(wf + i)),
                                _mm512_zextps256_ps512(_mm256_loadu_ps(xf + i)), a01, 0x00FF);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(a01), _mm512_extractf32x8_ps(a01, 1)),
                                 _mm256_add_ps(_mm512_castps512_ps256(a23), _mm512_extractf32x8_ps(a23, 1)));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float sum = _mm_cvtss_f32(h);
  _mm256_zeroupper();  // GCC emits no vzeroupper in a function taking zmm arguments (see top)
  for (; i < n; ++i) {
    float p = wf[i] * xf[i];
    __asm__("" : "+x"(p));
    sum += p;
  }
  return sum;
}

// R rows against one x: each x load serves R rows, and the 2R chains are independent, so the
// FMA latency no longer bounds the loop. Per row, the operations of vec_dot_f32_f32_avx512.
template <int R>
void f32_dot_rows(const float* x, const float* const* rows, int64_t n, float* out) {
  __m512 a01[R], a23[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a01[r] = a23[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      a01[r] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(rows[r] + i), a01[r]);
      a23[r] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(rows[r] + i + 16), a23[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) out[r] = f32_finish(x, rows[r], i, n, a01[r], a23[r]);
}

}  // namespace

// One row: vec_dot_f32_f32_avx2 / vec_dot_f16_f32_avx2 with a0 | a1 and a2 | a3 in two zmm
// (the same fused operations per lane, in the same order), so the same float bit for bit.
float vec_dot_f32_f32_avx512(const void* w, const void* x, int64_t n) {
  const auto* wf = static_cast<const float*>(w);
  const auto* xf = static_cast<const float*>(x);
  __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a01 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i), _mm512_loadu_ps(xf + i), a01);
    a23 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i + 16), _mm512_loadu_ps(xf + i + 16), a23);
  }
  return f32_finish(wf, xf, i, n, a01, a23);
}

void dot_f32_rows_avx512(const float* x, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 4 <= count; k += 4) f32_dot_rows<4>(x, rows + k, n, out + k);
  for (; k < count; ++k) f32_dot_rows<1>(x, rows + k, n, out + k);
  _mm256_zeroupper();
}

// y[i] = fma(a[k], rows[k][i], y[i]) for the rows in order, y loaded and stored once per group
// of 8 rows.
void fma_f32_rows_avx512(const float* a, const float* const* rows, int64_t count, float* y, int64_t n) {
  for (int64_t k0 = 0; k0 < count; k0 += 8) {
    const int kn = count - k0 < 8 ? static_cast<int>(count - k0) : 8;
    __m512 va[8];
    for (int k = 0; k < kn; ++k) va[k] = _mm512_set1_ps(a[k0 + k]);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
      __m512 v = _mm512_maskz_loadu_ps(m, y + i);
      for (int k = 0; k < kn; ++k) v = _mm512_fmadd_ps(va[k], _mm512_maskz_loadu_ps(m, rows[k0 + k] + i), v);
      _mm512_mask_storeu_ps(y + i, m, v);
    }
  }
}

float vec_dot_f16_f32_avx512(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  const auto* xf = static_cast<const float*>(x);
  __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a01 = _mm512_fmadd_ps(_mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wh + i))),
                          _mm512_loadu_ps(xf + i), a01);
    a23 = _mm512_fmadd_ps(_mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wh + i + 16))),
                          _mm512_loadu_ps(xf + i + 16), a23);
  }
  return f16_finish(wh, xf, i, n, a01, a23);
}

}  // namespace ds4::quant
