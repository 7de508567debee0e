// IQ2_XXS x Q8_K dot products with AVX2 (compiled with -mavx2 -mfma; F16C enabled per function).
//
// Exactness: the integer block sums are exact in any order, and the float tail does the same
// operations in the same order as the scalar reference: per block d = f16(w.d) * x.d, then
// sumf += d * bsum with the product rounded on its own (an empty asm, or separate mul / add
// intrinsics under -ffp-contract=off, forbid FMA contraction); the result is 0.125f * sumf.
// This file includes no header with non-static inline functions (fp16.h, fmt): their
// AVX2-compiled copies could be picked by the linker for portable callers.
//
// Decoding a block. Its 64 bytes of qs are 8 sub-blocks of {u32 grid indices, u32 signs+scale}.
// The sign and scale words of all 8 sub-blocks are decoded together in vector registers (one
// shuffle gathers the 8 words): the four 7-bit sign codes of each word become 4 bytes, the 8th
// (parity) bit is looked up with two nibble shuffles, and the scales 2*(aux>>28)+1 become int16
// pairs. Per sub-block there is then one byte shuffle + and + saturating add to spread its 32
// sign bits over 32 bytes, instead of 4 table loads and inserts, plus the 4 grid loads.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_common.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/iq2_xxs.h"
#include "quant/kernels.h"

namespace ds4::quant {
namespace {

// Sign code (7 stored bits, 8th implied by even parity) -> 8 bytes of +1 / -1 (the exact path).
constexpr auto kSignBytes = [] {
  struct Table {
    uint64_t v[128];
  } t{};
  for (int code = 0; code < 128; ++code) {
    int parity = 0;
    for (int j = 0; j < 7; ++j) parity ^= (code >> j) & 1;
    const int bits = code | (parity << 7);
    for (int j = 0; j < 8; ++j) t.v[code] |= static_cast<uint64_t>((bits >> j) & 1 ? 0xff : 0x01) << (8 * j);
  }
  return t;
}();

// The block's integer sum the plain way (as the scalar reference); used only for activation
// blocks containing -128, which ggml's Q8_K quantizer never produces.
static int32_t block_sum_exact(const BlockIQ2_XXS& blk, const int8_t* q8) {
  int32_t bsum = 0;
  for (int ib = 0; ib < kIq2xxsBlockElems / 32; ++ib) {
    uint32_t aux[2];
    std::memcpy(aux, blk.qs + 4 * ib, sizeof aux);
    int32_t sumi = 0;
    for (int l = 0; l < 4; ++l) {
      const uint64_t grid = iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
      const uint64_t sign = kSignBytes.v[(aux[1] >> (7 * l)) & 127];
      for (int j = 0; j < 8; ++j)
        sumi += static_cast<int32_t>((grid >> (8 * j)) & 0xff) * static_cast<int8_t>(sign >> (8 * j)) * q8[8 * l + j];
    }
    bsum += sumi * static_cast<int32_t>(2 * (aux[1] >> 28) + 1);
    q8 += 32;
  }
  return bsum;
}

// Constants of the block decoder, built once per call (kept in registers by the loops).
struct Consts {
  __m256i low7, parity_lut, low4, bitsel, sat7f, one;
  __m256i spread[4];  // spread[k]: bytes 4k, 4k+1 (low half) / 4k+2, 4k+3 (high half), each 8 times
  Consts() {
    low7 = _mm256_set1_epi32(0x7f);
    // parity_lut[i] = 0x80 when i has an odd number of set bits.
    parity_lut = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,  //
                                  0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    low4 = _mm256_set1_epi8(0x0f);
    bitsel = _mm256_set1_epi64x(0x8040201008040201LL);
    sat7f = _mm256_set1_epi8(0x7f);
    one = _mm256_set1_epi32(1);
    for (int k = 0; k < 4; ++k) {
      const char a = static_cast<char>(4 * k), b = static_cast<char>(4 * k + 1), c = static_cast<char>(4 * k + 2),
                 d = static_cast<char>(4 * k + 3);
      spread[k] = _mm256_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b,  //
                                   c, c, c, c, c, c, c, c, d, d, d, d, d, d, d, d);
    }
  }
};

// Sign bytes and scales of the 8 sub-blocks of one block. Dword lane order of the decoded
// vectors (from _mm256_shuffle_ps): low 128 bits sub-blocks 0 1 4 5, high 128 bits 2 3 6 7.
// sign_lo / sign_hi hold the low / high 128 bits in both halves (for in-lane byte shuffles);
// byte l of a sub-block's dword is its sign code l with the parity bit on top (ksigns_iq2xs).
// ls_lo / ls_hi likewise hold the scale 2*(aux>>28)+1 twice per dword, as int16.
struct Decoded {
  __m256i sign_lo, sign_hi, ls_lo, ls_hi;
};

static inline Decoded decode_signs_scales(const uint8_t* qs, const Consts& c) {
  const __m256 lo = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)));
  const __m256 hi = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32)));
  const __m256i v = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
  // Byte l of each dword = bits 7l..7l+6 of the word.
  __m256i codes = _mm256_and_si256(v, c.low7);
  codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(v, 1), _mm256_slli_epi32(c.low7, 8)));
  codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(v, 2), _mm256_slli_epi32(c.low7, 16)));
  codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(v, 3), _mm256_slli_epi32(c.low7, 24)));
  const __m256i par = _mm256_xor_si256(_mm256_shuffle_epi8(c.parity_lut, _mm256_and_si256(codes, c.low4)),
                                       _mm256_shuffle_epi8(c.parity_lut, _mm256_and_si256(_mm256_srli_epi16(codes, 4), c.low4)));
  const __m256i signs = _mm256_or_si256(codes, par);
  __m256i ls = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(v, 28), 1), c.one);
  ls = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
  return {_mm256_permute2x128_si256(signs, signs, 0x00), _mm256_permute2x128_si256(signs, signs, 0x11),
          _mm256_permute2x128_si256(ls, ls, 0x00), _mm256_permute2x128_si256(ls, ls, 0x11)};
}

// ls * sum_j sign_j * grid_j * q8_j of sub-block ib, as 8 int32 lanes. The sign is applied to
// the activations (q8 * +-1), exact unless q8 = -128 meets a minus sign (the callers check).
// Pair sums are at most 2*43*127 = 10922 (no int16 saturation); lanes 2*10922*31 (int32).
template <int ib>
static inline __m256i sub_block(const uint8_t* qs, const Decoded& dec, const int8_t* q8, const Consts& c) {
  constexpr int k = (ib & 1) | ((ib >> 2) << 1);  // position of the dword in its 128-bit half
  const __m256i& sgn = (ib & 2) ? dec.sign_hi : dec.sign_lo;
  const __m256i& lsv = (ib & 2) ? dec.ls_hi : dec.ls_lo;
  const uint8_t* gi = qs + 8 * ib;
  // Broadcast loads and dword blends: no shuffle-port work (set_epi64x takes three inserts).
  const auto* g = reinterpret_cast<const long long*>(iq2xxs_grid);
  __m256i grid = _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + gi[0])));
  grid = _mm256_blend_epi32(grid, _mm256_set1_epi64x(g[gi[1]]), 0x0c);
  grid = _mm256_blend_epi32(grid, _mm256_set1_epi64x(g[gi[2]]), 0x30);
  grid = _mm256_blend_epi32(grid, _mm256_set1_epi64x(g[gi[3]]), 0xc0);
  // Byte j of group l negative exactly when bit j of sign byte l is set (saturating add of 0x7f).
  const __m256i sel = _mm256_adds_epu8(_mm256_and_si256(_mm256_shuffle_epi8(sgn, c.spread[k]), c.bitsel), c.sat7f);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib));
  const __m256i pairs = _mm256_maddubs_epi16(grid, _mm256_sign_epi8(q, sel));  // unsigned x signed
  return _mm256_madd_epi16(pairs, _mm256_shuffle_epi32(lsv, k * 0x55));
}

// The 8 lanes of one block's integer sum (the block sum is their total). q8 must hold no -128.
__attribute__((always_inline)) static inline __m256i block_lanes(const BlockIQ2_XXS& blk, const int8_t* q8, const Consts& c) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(blk.qs);
  const Decoded dec = decode_signs_scales(qs, c);
  // Two accumulators: the sub-blocks are independent, so their latencies overlap.
  __m256i acc0 = sub_block<0>(qs, dec, q8, c);
  __m256i acc1 = sub_block<1>(qs, dec, q8, c);
  acc0 = _mm256_add_epi32(acc0, sub_block<2>(qs, dec, q8, c));
  acc1 = _mm256_add_epi32(acc1, sub_block<3>(qs, dec, q8, c));
  acc0 = _mm256_add_epi32(acc0, sub_block<4>(qs, dec, q8, c));
  acc1 = _mm256_add_epi32(acc1, sub_block<5>(qs, dec, q8, c));
  acc0 = _mm256_add_epi32(acc0, sub_block<6>(qs, dec, q8, c));
  acc1 = _mm256_add_epi32(acc1, sub_block<7>(qs, dec, q8, c));
  return _mm256_add_epi32(acc0, acc1);
}

// True when one of the 256 quants of an activation block is -128.
static inline bool has_minus128(const int8_t* q8) {
  __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  for (int i = 1; i < 8; ++i) m = _mm256_min_epi8(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * i)));
  const __m256i eq = _mm256_cmpeq_epi8(m, _mm256_set1_epi8(-128));
  return !_mm256_testz_si256(eq, eq);
}

// Lane k of the result = sum of all 8 lanes of v[k] (integer adds: exact in any order).
static inline __m256i transpose_sum8(const __m256i v[8]) {
  const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i t1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i t3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

}  // namespace

// F16C converts f16 exactly (NaN payloads included, as the scalar bit manipulation does);
// every AVX2 CPU has it.
__attribute__((target("f16c"))) float vec_dot_iq2_xxs_q8_K_avx2(const void* w, const void* q8k, int64_t n) {
  iq2xxs_detail::check_dot_args(w, q8k, n);
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(q8k);
  const int64_t nb = n / kIq2xxsBlockElems;
  const Consts c;
  float sumf = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    // Rows streamed from memory: fetch 2 KiB ahead (both lines a block may touch; never faults).
    const char* ahead = reinterpret_cast<const char*>(x + b) + 2048;
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + sizeof(BlockIQ2_XXS) - 1, _MM_HINT_T0);
    const int8_t* q8 = y[b].qs;
    const int32_t bsum = has_minus128(q8) ? block_sum_exact(x[b], q8) : avx2::hsum_i32(block_lanes(x[b], q8, c));
    const float d = _cvtsh_ss(x[b].d) * y[b].d;
    float prod = d * static_cast<float>(bsum);
    __asm__("" : "+x"(prod));  // rounded product, then the add: never one fused operation
    sumf += prod;
  }
  return 0.125f * sumf;
}

// Rows x tokens with AVX2 (kernels.h): 8 rows at a time, their block sums transposed into the
// 8 lanes of one vector, so that the float steps of the 8 rows (d = f16(w.d) * x.d, prod =
// d * bsum, sumf += prod; 0.125f * sumf) are one vector operation each: lane r does exactly
// row r's scalar sequence. Tokens whose activations hold a -128 take the per-row kernel.
__attribute__((target("f16c"))) void gemm_iq2_xxs_avx2(const void* w, size_t w_stride, int64_t rows, const void* act,
                                                       size_t act_stride, int64_t tokens, float* y, int64_t y_stride,
                                                       int64_t n) {
  const int64_t nb = n / kIq2xxsBlockElems;
  const Consts c;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  bool exact_token[64];
  for (int64_t t0 = 0; t0 < tokens; t0 += 64) {
    const int64_t t1 = t0 + 64 < tokens ? t0 + 64 : tokens;
    for (int64_t t = t0; t < t1; ++t) {
      const auto* yb = reinterpret_cast<const BlockQ8_K*>(ab + static_cast<size_t>(t) * act_stride);
      bool any = false;
      for (int64_t b = 0; b < nb && !any; ++b) any = has_minus128(yb[b].qs);
      exact_token[t - t0] = any;
    }
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
      const BlockIQ2_XXS* x[8];
      for (int k = 0; k < 8; ++k) x[k] = reinterpret_cast<const BlockIQ2_XXS*>(wb + static_cast<size_t>(r + k) * w_stride);
      for (int64_t t = t0; t < t1; ++t) {
        const bool prefetch = t == t0 && r + 16 <= rows;
        const void* at = ab + static_cast<size_t>(t) * act_stride;
        float* yt = y + t * y_stride + r;
        if (exact_token[t - t0]) {
          for (int k = 0; k < 8; ++k) yt[k] = vec_dot_iq2_xxs_q8_K_avx2(x[k], at, n);
          continue;
        }
        const auto* yb = static_cast<const BlockQ8_K*>(at);
        __m256 sumf = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          const int8_t* q8 = yb[b].qs;
          __m256i lanes[8];
          // The next group of rows is fetched while this one is decoded (the lines of block b
          // of each of its rows: a block may straddle two).
          if (prefetch) {
            for (int k = 0; k < 8; ++k) {
              const char* p = reinterpret_cast<const char*>(x[k] + b) + 8 * w_stride;
              _mm_prefetch(p, _MM_HINT_T0);
              _mm_prefetch(p + sizeof(BlockIQ2_XXS) - 1, _MM_HINT_T0);
            }
          }
          for (int k = 0; k < 8; ++k) lanes[k] = block_lanes(x[k][b], q8, c);
          const __m128i dh = _mm_setr_epi16(static_cast<short>(x[0][b].d), static_cast<short>(x[1][b].d),
                                            static_cast<short>(x[2][b].d), static_cast<short>(x[3][b].d),
                                            static_cast<short>(x[4][b].d), static_cast<short>(x[5][b].d),
                                            static_cast<short>(x[6][b].d), static_cast<short>(x[7][b].d));
          const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(dh), _mm256_set1_ps(yb[b].d));
          sumf = _mm256_add_ps(sumf, _mm256_mul_ps(d, _mm256_cvtepi32_ps(transpose_sum8(lanes))));
        }
        _mm256_storeu_ps(yt, _mm256_mul_ps(_mm256_set1_ps(0.125f), sumf));
      }
    }
    for (; r < rows; ++r)
      for (int64_t t = t0; t < t1; ++t)
        y[t * y_stride + r] =
            vec_dot_iq2_xxs_q8_K_avx2(wb + static_cast<size_t>(r) * w_stride, ab + static_cast<size_t>(t) * act_stride, n);
  }
}

}  // namespace ds4::quant
