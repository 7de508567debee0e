// IQ2_XXS x Q8_K dot product with AVX2 (compiled with -mavx2 -mfma; F16C enabled per function).
//
// Exactness: the integer block sums are exact in any order, and the float tail does the same
// operations in the same order as the scalar reference: per block d = f16(w.d) * x.d, then
// sumf += d * bsum with the product rounded on its own (an empty asm forbids FMA contraction).
// This file includes no header with non-static inline functions (fp16.h, fmt): their
// AVX2-compiled copies could be picked by the linker for portable callers.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_common.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/iq2_xxs.h"

namespace ds4::quant {
namespace {

// Sign code (7 stored bits, 8th implied by even parity) -> 8 bytes of +1 / -1 for _mm256_sign_epi8.
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

// ls * sum_j sign_j * grid_j * q8_j for one 32-weight sub-block, as 8 int32 lanes. The sign is
// applied to the activations (q8 * +-1), which is exact unless q8 = -128 meets a minus sign;
// the caller detects -128 and recomputes such blocks with block_sum_exact.
// Pair sums are at most 2*43*127 = 10922 (no int16 saturation); lanes 2*10922*31 (int32).
static inline __m256i scaled_sub_block(const uint32_t aux[2], const int8_t* q8, __m256i& saw_min) {
  const __m256i grid = _mm256_set_epi64x(static_cast<long long>(iq2xxs_grid[(aux[0] >> 24) & 255]),
                                         static_cast<long long>(iq2xxs_grid[(aux[0] >> 16) & 255]),
                                         static_cast<long long>(iq2xxs_grid[(aux[0] >> 8) & 255]),
                                         static_cast<long long>(iq2xxs_grid[aux[0] & 255]));
  const __m256i sign = _mm256_set_epi64x(static_cast<long long>(kSignBytes.v[(aux[1] >> 21) & 127]),
                                         static_cast<long long>(kSignBytes.v[(aux[1] >> 14) & 127]),
                                         static_cast<long long>(kSignBytes.v[(aux[1] >> 7) & 127]),
                                         static_cast<long long>(kSignBytes.v[aux[1] & 127]));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  saw_min = _mm256_or_si256(saw_min, _mm256_cmpeq_epi8(q, _mm256_set1_epi8(-128)));
  const __m256i pairs = _mm256_maddubs_epi16(grid, _mm256_sign_epi8(q, sign));  // unsigned x signed
  const __m256i ls = _mm256_set1_epi16(static_cast<int16_t>(2 * (aux[1] >> 28) + 1));
  return _mm256_madd_epi16(pairs, ls);
}

static inline int32_t hsum_epi32(__m256i v) { return avx2::hsum_i32(v); }

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

}  // namespace

// F16C converts f16 exactly (NaN payloads included, as the scalar bit manipulation does);
// every AVX2 CPU has it.
__attribute__((target("f16c"))) float vec_dot_iq2_xxs_q8_K_avx2(const void* w, const void* q8k, int64_t n) {
  iq2xxs_detail::check_dot_args(w, q8k, n);
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(q8k);
  const int64_t nb = n / kIq2xxsBlockElems;

  float sumf = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockIQ2_XXS& blk = x[b];
    const int8_t* q8 = y[b].qs;
    // Two accumulators: the sub-blocks are independent, so their latencies overlap.
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    __m256i saw_min = _mm256_setzero_si256();
    for (int ib = 0; ib < kIq2xxsBlockElems / 32; ib += 2) {
      uint32_t aux[4];
      std::memcpy(aux, blk.qs + 4 * ib, sizeof aux);
      acc0 = _mm256_add_epi32(acc0, scaled_sub_block(aux, q8 + 32 * ib, saw_min));
      acc1 = _mm256_add_epi32(acc1, scaled_sub_block(aux + 2, q8 + 32 * ib + 32, saw_min));
    }
    const int32_t bsum = _mm256_testz_si256(saw_min, saw_min) ? hsum_epi32(_mm256_add_epi32(acc0, acc1))
                                                               : block_sum_exact(blk, q8);
    const float d = _cvtsh_ss(blk.d) * y[b].d;
    float prod = d * static_cast<float>(bsum);
    __asm__("" : "+x"(prod));  // rounded product, then the add: never one fused operation
    sumf += prod;
  }
  return 0.125f * sumf;
}

}  // namespace ds4::quant
