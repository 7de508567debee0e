// IQ3_XXS and IQ3_S writers: ggml's quantize_iq3_xxs / quantize_iq3_s, byte for byte.
//
// Both code 32-weight sub-blocks as eight 4-weight magnitude vectors on a lattice of
// {1, 3, ..., 15}^4 in odd units (256 resp. 512 points), signs and a 4-bit sub-block scale.
// The search per sub-block: candidate inverse scales around max/15 (IQ3_XXS 31 of them in
// steps of 0.2, IQ3_S 19), each rounding the magnitudes to levels 0..7 and snapping off-grid
// vectors to their best precomputed neighbour; the assignment with the best weighted
// correlation sumqx^2/sumq2 wins; then the vectors are re-snapped with the fitted scale and
// the scale refitted. Differences (all ggml's): IQ3_XXS stores 7 sign bits per 8 weights
// (even parity, the cheapest weight flipped), re-snaps only the off-grid vectors and counts
// a sub-block below 1e-8 as zero; IQ3_S stores all sign bits, re-snaps every vector when any
// was off the grid (or the search never improved), and only an exact zero maximum is zero.
// Stored super-block scales carry ggml's fudge factors 1.0125 and 1.033.
//
// Float determinism: every expression is evaluated as written, one rounding per operation
// (ds4_quant is built with -ffp-contract=off), as in ggml's baseline x86-64 build.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks_ext.h"
#include "quant/iq_search.h"
#include "quant/k_quant_search.h"
#include "quant/kernels_ext.h"

namespace ds4::quant {
namespace {

constexpr int kLevels = 8;  // levels 0..7, odd values 1 .. 15
constexpr int kSub = 32;    // weights per sub-block

struct Variant {
  const char* name;
  const GridSearch& (*grid)();
  bool parity_signs;   // IQ3_XXS
  int steps;           // candidate scales -steps..steps
  bool resnap_all;     // IQ3_S: re-snap every vector
  float zero_eps;      // max below it: all zero (IQ3_S: 0, i.e. only max == 0)
};

const Variant kXxs{"IQ3_XXS", iq3xxs_search, true, 15, false, 1e-8f};
const Variant kS{"IQ3_S", iq3s_search, false, 9, true, 0.f};

int8_t level_for(float v) { return static_cast<int8_t>(clamp_int(nearest_int(0.5f * (v - 1)), 0, kLevels - 1)); }

// Rounds 4 magnitudes with inverse scale id into L; an off-grid vector is snapped to its best
// neighbour for `scale`. Returns whether the rounded vector was on the grid.
bool round_group(const Variant& v, const GridSearch& g, const float* xval, const float* waux, float id, float scale,
                 int8_t* L) {
  for (int i = 0; i < 4; ++i) L[i] = level_for(id * xval[i]);
  const uint32_t u = g.key(L);
  if (g.map[u] >= 0) return true;
  if (g.best_neighbour(u, xval, waux, scale, L) < 0)
    fail("{} quantize: no finite grid candidate (values too large)", v.name);
  return false;
}

void fit(const float* xval, const float* weight, const int8_t* L, float* sumqx, float* sumq2) {
  float sx = 0, s2 = 0;
  for (int i = 0; i < kSub; ++i) {
    const float w = weight[i];
    const float q = static_cast<float>(2 * L[i] + 1);
    sx += w * xval[i] * q;
    s2 += w * q * q;
  }
  *sumqx = sx;
  *sumq2 = s2;
}

// One 32-weight sub-block. false: all zero (nothing stored, scale 0). Else writes the scale,
// the 8 grid indices and the 4 sign bytes (IQ3_XXS: 7-bit codes).
bool quantize_sub_block(const Variant& v, const GridSearch& g, const float* xb, const float* weight, float* out_scale,
                        int idx[8], uint8_t signs[4]) {
  float xval[kSub], waux[kSub];
  int8_t L[kSub] = {}, Laux[kSub];
  for (int i = 0; i < kSub; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 4; ++k) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
      const float x = xb[8 * k + i];
      xval[8 * k + i] = x >= 0 ? x : -x;
      if (x < 0) {
        ++nflip;
        s = static_cast<uint8_t>(s | (1 << i));
      }
    }
    if (v.parity_signs && nflip % 2) {
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
    signs[k] = v.parity_signs ? static_cast<uint8_t>(s & 127) : s;
  }
  float max = xval[0];
  for (int i = 1; i < kSub; ++i) max = max > xval[i] ? max : xval[i];
  *out_scale = 0;
  if (v.resnap_all ? !max : max < v.zero_eps) return false;

  float best = 0;
  float scale = max / (2 * kLevels - 1);
  bool on_grid[8];
  for (bool& b : on_grid) b = !v.resnap_all;  // IQ3_S starts from "not on the grid"
  for (int is = -v.steps; is <= v.steps; ++is) {
    const float id = (2 * kLevels - 1 + is * 0.2f) / max;
    const float this_scale = 1 / id;
    bool on_aux[8];
    for (int k = 0; k < 8; ++k) on_aux[k] = round_group(v, g, xval + 4 * k, waux + 4 * k, id, this_scale, Laux + 4 * k);
    float sumqx, sumq2;
    fit(xval, weight, Laux, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, sizeof L);
      std::memcpy(on_grid, on_aux, sizeof on_grid);
    }
  }
  int off = 0;
  for (bool b : on_grid) off += !b;
  if (off > 0 && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (on_grid[k] && !v.resnap_all) continue;
      round_group(v, g, xval + 4 * k, waux + 4 * k, id, scale, L + 4 * k);
    }
    float sumqx, sumq2;
    fit(xval, weight, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {  // unreachable for valid input (ggml keeps the guard): |scale|, signs flipped
    scale = -scale;
    for (int k = 0; k < 4; ++k) signs[k] = static_cast<uint8_t>(v.parity_signs ? ~signs[k] & 127 : ~signs[k]);
  }
  if (!(scale >= 0)) fail("{} quantize: sub-block scale is not a number", v.name);
  for (int k = 0; k < 8; ++k) {
    const int32_t gi = g.map[g.key(L + 4 * k)];
    if (gi < 0) fail("{} quantize: levels off the grid (ggml aborts here)", v.name);
    idx[k] = gi;
  }
  *out_scale = scale;
  return true;
}

// The 8 sub-blocks of one super-block: store(ib, idx, signs) for each non-zero one;
// returns max_scale and fills scales.
template <class Store>
float quantize_super_block(const Variant& v, const float* xbl, const float* qwbl, float* scales, Store store) {
  const GridSearch& g = v.grid();
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  if (!std::isfinite(sumx2)) fail("{} quantize: values too large (sum of squares overflows float)", v.name);
  const float sigma2 = 2 * sumx2 / kQK_K;
  float max_scale = 0;
  float weight[kSub];
  for (int ib = 0; ib < kQK_K / kSub; ++ib) {
    const float* xb = xbl + kSub * ib;
    if (qwbl) {
      for (int i = 0; i < kSub; ++i) weight[i] = qwbl[kSub * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < kSub; ++i) weight[i] = xb[i] * xb[i];
    }
    for (int i = 0; i < kSub; ++i)
      if (!std::isfinite(weight[i])) fail("{} quantize: importance weight overflows float", v.name);
    int idx[8];
    uint8_t signs[4];
    float s;
    const bool stored = quantize_sub_block(v, g, xb, weight, &s, idx, signs);
    scales[ib] = s;
    if (!stored) continue;
    store(ib, idx, signs);
    max_scale = max_scale > s ? max_scale : s;
  }
  return max_scale;
}

int scale_code(float id, float scale) { return clamp_int(nearest_int(0.5f * (id * scale - 1)), 0, 15); }

void check_scale(uint16_t h, float d, const char* name) {
  if ((h & 0x7fff) >= 0x7c00) fail("{} quantize: block scale {} exceeds the f16 range", name, d);
}

}  // namespace

size_t quantize_iq3_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ3_XXS*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockIQ3_XXS& y = out[r * nb + b];
      uint8_t q3[3 * kQK_K / 8] = {};  // 64 grid indices, then 8 words of signs + scale
      uint32_t words[kQK_K / kSub] = {};
      float scales[kQK_K / kSub];
      const float max_scale = quantize_super_block(
          kXxs, src + r * n_per_row + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, scales,
          [&](int ib, const int* idx, const uint8_t* s) {
            for (int k = 0; k < 8; ++k) q3[8 * ib + k] = static_cast<uint8_t>(idx[k]);
            words[ib] = static_cast<uint32_t>(s[0]) | (static_cast<uint32_t>(s[1]) << 7) |
                        (static_cast<uint32_t>(s[2]) << 14) | (static_cast<uint32_t>(s[3]) << 21);
          });
      std::memset(&y, 0, sizeof y);
      if (!max_scale) continue;
      const float d = max_scale / 31;
      y.d = fp32_to_fp16(d * 1.0125f);
      check_scale(y.d, d, kXxs.name);
      const float id = 1 / d;
      for (int ib = 0; ib < kQK_K / kSub; ++ib) words[ib] |= static_cast<uint32_t>(scale_code(id, scales[ib])) << 28;
      std::memcpy(q3 + kQK_K / 4, words, sizeof words);
      std::memcpy(y.qs, q3, sizeof q3);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ3_XXS);
}

size_t quantize_iq3_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ3_S*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockIQ3_S& y = out[r * nb + b];
      std::memset(&y, 0, sizeof y);
      float scales[kQK_K / kSub];
      // ggml advances its qs and signs cursors only past stored sub-blocks, while qh and the
      // scales are indexed by sub-block: after an all-zero sub-block (32 exact zeros), the
      // following sub-blocks' low index bytes and signs land one slot early (and decode
      // wrongly). Reproduced, because these bytes must be ggml's; docs/FORMATS.md notes it.
      int cursor = 0;
      const float max_scale = quantize_super_block(
          kS, src + r * n_per_row + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, scales,
          [&](int ib, const int* idx, const uint8_t* s) {
            for (int k = 0; k < 8; ++k) {
              const int i8 = 8 * ib + k;
              y.qs[8 * cursor + k] = static_cast<uint8_t>(idx[k] & 255);
              y.qh[i8 / 8] = static_cast<uint8_t>(y.qh[i8 / 8] | ((idx[k] >> 8) << (i8 % 8)));
            }
            for (int k = 0; k < 4; ++k) y.signs[4 * cursor + k] = s[k];
            ++cursor;
          });
      if (!max_scale) continue;
      const float d = max_scale / 31;
      y.d = fp32_to_fp16(d * 1.033f);
      check_scale(y.d, d, kS.name);
      const float id = 1 / d;
      for (int ib = 0; ib < kQK_K / kSub; ib += 2)
        y.scales[ib / 2] = static_cast<uint8_t>(scale_code(id, scales[ib]) | (scale_code(id, scales[ib + 1]) << 4));
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ3_S);
}

}  // namespace ds4::quant
