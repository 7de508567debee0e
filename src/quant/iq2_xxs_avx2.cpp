// IQ2_XXS x Q8_K dot product with AVX2 (compiled with -mavx2 -mfma).
//
// Exactness: the integer block sums are exact in any order, and the float part (scales times
// block sums, accumulated block by block) is delegated to the shared out-of-line
// iq2xxs_detail::accumulate_block_sums, compiled without FMA, so this returns exactly the
// scalar reference's float. This file includes no header with non-static inline functions
// (fp16.h, fmt): their AVX2-compiled copies could be picked by the linker for portable callers.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/iq2_xxs.h"

namespace ds4::quant {
namespace {

constexpr int kChunkBlocks = 64;  // block sums gathered before each call into the float tail

// Sum of sign_j * grid_j * q8_j over one 32-weight sub-block. With negatives N (grid bytes of
// negative-signed weights, others 0): sum = P - 2N, where P = sum grid*q8. Computing it this way
// keeps the sign off the int8 activations, so q8 = -128 needs no special case.
static inline __m256i sub_block_products(const uint32_t aux[2], const int8_t* q8, __m256i bit_masks,
                                         __m256i byte_of_sign) {
  const __m256i grid = _mm256_set_epi64x(static_cast<long long>(iq2xxs_grid[(aux[0] >> 24) & 255]),
                                         static_cast<long long>(iq2xxs_grid[(aux[0] >> 16) & 255]),
                                         static_cast<long long>(iq2xxs_grid[(aux[0] >> 8) & 255]),
                                         static_cast<long long>(iq2xxs_grid[aux[0] & 255]));
  const uint32_t signs4 = static_cast<uint32_t>(ksigns_iq2xs[aux[1] & 127]) |
                          static_cast<uint32_t>(ksigns_iq2xs[(aux[1] >> 7) & 127]) << 8 |
                          static_cast<uint32_t>(ksigns_iq2xs[(aux[1] >> 14) & 127]) << 16 |
                          static_cast<uint32_t>(ksigns_iq2xs[(aux[1] >> 21) & 127]) << 24;
  // Byte lane i gets sign byte i/8, then its own bit i%8 tested: 0xff where negative.
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(signs4)), byte_of_sign);
  const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_masks), bit_masks);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  const __m256i ones16 = _mm256_set1_epi16(1);
  // maddubs: unsigned grid (<= 43) times signed q8, pairs summed; |pair| <= 2*43*128 fits int16.
  const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(grid, q), ones16);
  const __m256i n = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(grid, negative), q), ones16);
  return _mm256_sub_epi32(p, _mm256_slli_epi32(n, 1));
}

static inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

float vec_dot_iq2_xxs_q8_K_avx2(const void* w, const void* q8k, int64_t n) {
  iq2xxs_detail::check_dot_args(w, q8k, n);
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(q8k);
  const int64_t nb = n / kIq2xxsBlockElems;

  const __m256i bit_masks = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i byte_of_sign = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                 0x0101010101010101ll, 0x0000000000000000ll);
  int32_t bsum[kChunkBlocks];
  float sumf = 0.f;
  for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
    const int64_t count = nb - b0 < kChunkBlocks ? nb - b0 : kChunkBlocks;
    for (int64_t c = 0; c < count; ++c) {
      const BlockIQ2_XXS& blk = x[b0 + c];
      const int8_t* q8 = y[b0 + c].qs;
      __m256i acc = _mm256_setzero_si256();
      for (int ib = 0; ib < kIq2xxsBlockElems / 32; ++ib) {
        uint32_t aux[2];
        std::memcpy(aux, blk.qs + 4 * ib, sizeof aux);
        const __m256i ls = _mm256_set1_epi32(2 * static_cast<int32_t>(aux[1] >> 28) + 1);
        const __m256i sums = sub_block_products(aux, q8 + 32 * ib, bit_masks, byte_of_sign);
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(sums, ls));
      }
      bsum[c] = hsum_epi32(acc);
    }
    sumf = iq2xxs_detail::accumulate_block_sums(sumf, x + b0, y + b0, bsum, count);
  }
  return 0.125f * sumf;
}

}  // namespace ds4::quant
