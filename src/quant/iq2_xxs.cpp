// IQ2_XXS: dequantization, ggml-identical quantization search, scalar dot product with Q8_K.
//
// Float determinism: the quantizer reproduces ggml's choices bit for bit only if every float
// expression below is evaluated as written (left to right, one rounding per operation), as in
// ggml's baseline x86-64 build. So: no -ffast-math, and no FMA contraction (ds4_quant is built
// with -ffp-contract=off; ISO C++ mode does not contract either).
#include "quant/iq2_xxs.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/k_quant_search.h"

namespace ds4::quant {

static_assert(sizeof(BlockQ8_K) == 292);

namespace {

constexpr int kQK = kIq2xxsBlockElems;
constexpr int kMaxLevel = 3;             // levels 0..2, i.e. odd values 1, 3, 5
constexpr float kGroupMaxEps = 1e-15f;   // ggml's GROUP_MAX_EPS: below it a group is all zero

void check_elems(const char* what, int64_t n) {
  if (n < 0 || n % kQK != 0) fail("{}: element count {} is not a non-negative multiple of {}", what, n, kQK);
}

// The level (0..kMaxLevel-1) whose odd value 2*level+1 is nearest to v = x/scale.
int8_t level_for(float v) {
  const int l = nearest_int(0.5f * (v - 1));
  return static_cast<int8_t>(std::max(0, std::min(kMaxLevel - 1, l)));
}

// Weighted least-squares terms for the odd values q = 2*L+1 of one 32-value block; the best
// scale is sumqx/sumq2. Summed in ggml's order.
void fit_sums(const float* xval, const float* weight, const int8_t* L, float* sumqx, float* sumq2) {
  float sx = 0, s2 = 0;
  for (int i = 0; i < 32; ++i) {
    const float w = weight[i];
    const float q = static_cast<float>(2 * L[i] + 1);
    sx += w * xval[i] * q;
    s2 += w * q * q;
  }
  *sumqx = sx;
  *sumq2 = s2;
}

// Returns v after forcing it into a register as a float: a product passed through here is
// rounded on its own, so the compiler cannot fuse it with a following add into an FMA.
inline float rounded(float v) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(v));
#else
  volatile float t = v;
  v = t;
#endif
  return v;
}

uint16_t pack_levels(const int8_t* L) {
  uint16_t u = 0;
  for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[i] << (2 * i)));
  return u;
}

// Among the precomputed nearest grid points of an off-grid vector, the one with the smallest
// weighted error sum w_i (scale*q_i - x_i)^2 (first one on ties). Writes its levels to L.
int best_neighbour(const Iq2xxsSearchTables& t, uint16_t u, const float* xval, const float* w, float scale,
                   int8_t* L) {
  const uint16_t* list = t.neighbours.data() + (-t.map[u] - 1);
  const int count = list[0];
  float best_d2 = FLT_MAX;
  int best = -1;
  for (int j = 1; j <= count; ++j) {
    const float* q = t.level_values[list[j]];
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = scale * q[i] - xval[i];
      d2 += w[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = list[j];
    }
  }
  if (best < 0) fail("IQ2_XXS quantize: no finite grid candidate (non-finite intermediate values)");
  const uint64_t p = t.levels[best];
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((((p >> (8 * i)) & 0xff) - 1) / 2);
  return best;
}

// Grid index of the 8 levels at L; when off the grid, snaps L to the best neighbour.
int grid_index_or_neighbour(const Iq2xxsSearchTables& t, int8_t* L, const float* xval, const float* w, float scale) {
  const uint16_t u = pack_levels(L);
  const int g = t.map[u];
  return g >= 0 ? g : best_neighbour(t, u, xval, w, scale, L);
}

// One 256-weight block. Mirrors ggml's quantize_row_iq2_xxs_impl step by step.
void quantize_block(const Iq2xxsSearchTables& t, const float* xbl, const float* qwbl, BlockIQ2_XXS& out,
                    int64_t row, int64_t block) {
  float scales[kQK / 32];
  float weight[32], xval[32], waux[32];
  int8_t L[32], Laux[32];
  uint8_t block_signs[4];
  uint32_t q2[2 * (kQK / 32)] = {};
  float max_scale = 0;

  float sumx2 = 0;
  for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
  if (!std::isfinite(sumx2))
    fail("IQ2_XXS quantize: row {} block {}: values too large (sum of squares overflows float)", row, block);
  const float sigma2 = sumx2 / kQK;

  for (int ib = 0; ib < kQK / 32; ++ib) {
    const float* xb = xbl + 32 * ib;
    const float* qw = qwbl + 32 * ib;
    for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    for (int i = 0; i < 32; ++i) {
      if (!std::isfinite(weight[i]))
        fail("IQ2_XXS quantize: row {} block {}: importance weight overflows float", row, block);
      waux[i] = std::sqrt(weight[i]);
    }
    // Work on magnitudes; the grid has an even number of negative signs per 8 weights, so with
    // an odd count the weight that costs least (w*x^2) keeps the wrong sign.
    for (int k = 0; k < 4; ++k) {
      int nflip = 0;
      uint8_t s = 0;
      for (int i = 0; i < 8; ++i) {
        if (xb[8 * k + i] >= 0) {
          xval[8 * k + i] = xb[8 * k + i];
        } else {
          xval[8 * k + i] = -xb[8 * k + i];
          ++nflip;
          s = static_cast<uint8_t>(s | (1 << i));
        }
      }
      if (nflip % 2) {
        int imin = 0;
        float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
        for (int i = 1; i < 8; ++i) {
          const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
          if (ax < min) {
            min = ax;
            imin = i;
          }
        }
        xval[8 * k + imin] = -xval[8 * k + imin];
        s = static_cast<uint8_t>(s ^ (1 << imin));
      }
      block_signs[k] = s & 127;
    }
    float max = xval[0];
    for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
    if (max < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // ggml's make_qp_quants; shared with the K-quant writers (same search, same float order).
    float scale = search_scale_qp(32, kMaxLevel + 1, xval, reinterpret_cast<uint8_t*>(L), weight);
    const float eff_max = scale * kMaxLevel;
    if (eff_max <= 0) {
      scales[ib] = 0;
      continue;
    }
    // Try 13 inverse scales around the fit and keep the grid assignment with the best
    // weighted correlation sumqx^2/sumq2.
    float best = 0;
    for (int is = -6; is <= 6; ++is) {
      const float id = (2 * kMaxLevel - 1 + is * 0.1f) / eff_max;
      const float this_scale = 1 / id;
      for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < 8; ++i) {
          Laux[8 * k + i] = level_for(id * xval[8 * k + i]);
        }
        grid_index_or_neighbour(t, Laux + 8 * k, xval + 8 * k, waux + 8 * k, this_scale);
      }
      float sumqx, sumq2;
      fit_sums(xval, weight, Laux, &sumqx, &sumq2);
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        scale = sumqx / sumq2;
        best = scale * sumqx;
        std::memcpy(L, Laux, 32);
      }
    }
    // Re-round with the winning scale, snap to the grid, and refit the scale.
    if (scale > 0) {
      const float id = 1 / scale;
      for (int k = 0; k < 4; ++k) {
        int8_t Lk[8];
        for (int i = 0; i < 8; ++i) {
          Lk[i] = level_for(id * xval[8 * k + i]);
        }
        // ggml snaps with best_neighbour writing into L, then overwrites L from the chosen
        // point; either way L ends up as that point's levels.
        const int g = grid_index_or_neighbour(t, Lk, xval + 8 * k, waux + 8 * k, scale);
        const uint64_t p = t.levels[g];
        for (int i = 0; i < 8; ++i) L[8 * k + i] = static_cast<int8_t>((((p >> (8 * i)) & 0xff) - 1) / 2);
      }
      float sumqx, sumq2;
      fit_sums(xval, weight, L, &sumqx, &sumq2);
      if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) {
      // Unreachable for valid input (ggml keeps the guard): encode |scale| with flipped signs.
      scale = -scale;
      for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
    }
    if (!(scale >= 0)) fail("IQ2_XXS quantize: row {} block {}: scale is not a number", row, block);
    for (int k = 0; k < 4; ++k) {
      const uint16_t u = pack_levels(L + 8 * k);
      if (u >= Iq2xxsSearchTables::kMapSize || t.map[u] < 0)
        fail("IQ2_XXS quantize: row {} block {}: levels off the grid (ggml aborts here)", row, block);
      q2[2 * ib + 0] |= static_cast<uint32_t>(t.map[u]) << (8 * k);
      q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
    }
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }

  out.d = fp32_to_fp16(0.f);
  if (!max_scale) {
    std::memset(out.qs, 0, sizeof out.qs);
    return;
  }
  // Sub-block scales are stored as 4-bit s with scale ~ d*(2s+1), d = max_scale/31.
  const float d = max_scale / 31;
  out.d = fp32_to_fp16(d);
  if ((out.d & 0x7fff) >= 0x7c00)
    fail("IQ2_XXS quantize: row {} block {}: block scale {} exceeds the f16 range", row, block, d);
  const float id = 1 / d;
  for (int ib = 0; ib < kQK / 32; ++ib) {
    const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
    q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
  }
  std::memcpy(out.qs, q2, sizeof out.qs);
}

}  // namespace

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
  check_elems("IQ2_XXS dequantize", n);
  if (n > 0 && (!src || !dst)) fail("IQ2_XXS dequantize: null buffer for {} elements", n);
  const auto* blocks = static_cast<const BlockIQ2_XXS*>(src);
#if defined(__SSE2__)
  // SSE2 is part of x86-64, so this is still the portable build. Lane-wise it performs the
  // very same IEEE operations as the scalar loop below (int -> float, one multiply, sign flip).
  const __m128i zero = _mm_setzero_si128();
  const __m128i bits_lo = _mm_setr_epi32(1, 2, 4, 8), bits_hi = _mm_setr_epi32(16, 32, 64, 128);
  const __m128i sign_bit = _mm_set1_epi32(static_cast<int>(0x80000000u));
#endif
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int ib = 0; ib < kQK / 32; ++ib) {
      uint32_t aux[2];
      std::memcpy(aux, blocks[b].qs + 4 * ib, sizeof aux);
      // Sub-block scale (0.5 + s)/4 * d, evaluated in ggml's order.
      const float db = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint64_t* grid = &iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
        const uint32_t signs = ksigns_iq2xs[(aux[1] >> (7 * l)) & 127];
        // ggml writes db*grid*(sign ? -1 : 1); multiplying by -1 is a sign flip (its compiled
        // code flips the bit too, NaN included), done here without a data-dependent branch.
#if defined(__SSE2__)
        const __m128i g16 = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(grid)), zero);
        const __m128 vdb = _mm_set1_ps(db);
        const __m128 lo = _mm_mul_ps(vdb, _mm_cvtepi32_ps(_mm_unpacklo_epi16(g16, zero)));
        const __m128 hi = _mm_mul_ps(vdb, _mm_cvtepi32_ps(_mm_unpackhi_epi16(g16, zero)));
        const __m128i s = _mm_set1_epi32(static_cast<int>(signs));
        const __m128i neg_lo = _mm_and_si128(_mm_cmpeq_epi32(_mm_and_si128(s, bits_lo), bits_lo), sign_bit);
        const __m128i neg_hi = _mm_and_si128(_mm_cmpeq_epi32(_mm_and_si128(s, bits_hi), bits_hi), sign_bit);
        _mm_storeu_ps(dst, _mm_xor_ps(lo, _mm_castsi128_ps(neg_lo)));
        _mm_storeu_ps(dst + 4, _mm_xor_ps(hi, _mm_castsi128_ps(neg_hi)));
#else
        uint8_t mag[8];
        std::memcpy(mag, grid, sizeof mag);  // little-endian: byte j is weight j
        for (int j = 0; j < 8; ++j) {
          const float v = db * static_cast<float>(mag[j]);
          dst[j] = std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ (((signs >> j) & 1u) << 31));
        }
#endif
        dst += 8;
      }
    }
  }
}

size_t quantize_iq2_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (nrows < 0) fail("IQ2_XXS quantize: negative row count {}", nrows);
  check_elems("IQ2_XXS quantize", n_per_row);
  const int64_t nblocks = n_per_row / kQK;
  const size_t bytes = static_cast<size_t>(nrows) * static_cast<size_t>(nblocks) * kIq2xxsBlockBytes;
  if (nrows == 0 || n_per_row == 0) return 0;
  if (!src || !dst) fail("IQ2_XXS quantize: null source or destination buffer");
  if (!imatrix)
    fail("IQ2_XXS quantize: an importance matrix is required (ggml asserts \"missing quantization weights\")");
  for (int64_t i = 0; i < n_per_row; ++i)
    if (!std::isfinite(imatrix[i]) || imatrix[i] < 0)
      fail("IQ2_XXS quantize: importance weight {} is {} (must be finite and >= 0)", i, imatrix[i]);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t i = 0; i < n_per_row; ++i)
      if (!std::isfinite(src[r * n_per_row + i]))
        fail("IQ2_XXS quantize: row {} element {} is not finite", r, i);

  const Iq2xxsSearchTables& t = iq2xxs_search_tables();
  auto* out = static_cast<BlockIQ2_XXS*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nblocks; ++b)
      quantize_block(t, src + r * n_per_row + b * kQK, imatrix + b * kQK, out[r * nblocks + b], r, b);
  return bytes;
}

namespace iq2xxs_detail {

void check_dot_args(const void* w, const void* q8k, int64_t n) {
  check_elems("IQ2_XXS dot", n);
  if (n > 0 && (!w || !q8k)) fail("IQ2_XXS dot: null row for {} elements", n);
}

}  // namespace iq2xxs_detail

float vec_dot_iq2_xxs_q8_K_scalar(const void* w, const void* q8k, int64_t n) {
  iq2xxs_detail::check_dot_args(w, q8k, n);
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(q8k);
  float sumf = 0.f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const int8_t* q8 = y[b].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < kQK / 32; ++ib) {
      uint32_t aux[2];
      std::memcpy(aux, x[b].qs + 4 * ib, sizeof aux);
      const int32_t ls = 2 * static_cast<int32_t>(aux[1] >> 28) + 1;
      int32_t sumi = 0;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
        const uint8_t signs = ksigns_iq2xs[(aux[1] >> (7 * l)) & 127];
        for (int j = 0; j < 8; ++j) {
          const int32_t prod = static_cast<int32_t>((grid >> (8 * j)) & 0xff) * q8[j];
          const int32_t neg = -static_cast<int32_t>((signs & kmask_iq2xs[j]) != 0);  // 0 or -1
          sumi += (prod ^ neg) - neg;  // prod or -prod, without a branch
        }
        q8 += 8;
      }
      bsum += sumi * ls;
    }
    const float d = fp16_to_fp32(x[b].d) * y[b].d;
    sumf += rounded(d * static_cast<float>(bsum));  // as ggml's generic build: mul, then add
  }
  return 0.125f * sumf;
}

}  // namespace ds4::quant
