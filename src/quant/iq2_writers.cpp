// IQ2_XS and IQ2_S writers: ggml's quantize_iq2_xs / quantize_iq2_s, byte for byte.
//
// Both formats code 16-weight sub-blocks as two 8-weight magnitude vectors on a lattice
// (512 resp. 1024 points of {1, 3, 5}^8 in odd units), explicit signs and a 4-bit sub-block
// scale. The search per sub-block: 19 candidate inverse scales around max/5, each rounding
// the magnitudes to levels and snapping an off-grid vector to its best precomputed
// neighbour, keep the assignment with the best weighted correlation sumqx^2/sumq2, then
// re-snap the off-grid vectors with the fitted scale and refit. The two formats differ in
// the weighting, in how signs are stored (IQ2_XS: 7 bits, the 8th implied by even parity;
// IQ2_S: 8 bits), in the all-zero threshold and in a fudge factor on the stored scale.
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

constexpr int kLevels = 3;  // levels 0..2, odd values 1, 3, 5

struct Variant {
  const char* name;
  const GridSearch& (*grid)();
  bool parity_signs;  // IQ2_XS: odd sign counts are fixed by flipping the cheapest weight
  bool sigma_twice;   // IQ2_S: sigma2 = 2 * mean(x^2)
  float zero_eps;     // below it a sub-block is all zero
};

int8_t level_for(float v) { return static_cast<int8_t>(clamp_int(nearest_int(0.5f * (v - 1)), 0, kLevels - 1)); }

// Rounds the 8 magnitudes at xval with inverse scale id into L; snaps an off-grid vector to
// its best neighbour for `scale`. Returns whether the rounded vector was on the grid.
bool round_group(const GridSearch& g, const float* xval, const float* waux, float id, float scale, int8_t* L,
                 const char* name) {
  for (int i = 0; i < 8; ++i) L[i] = level_for(id * xval[i]);
  const uint32_t u = g.key(L);
  if (g.map[u] >= 0) return true;
  if (g.best_neighbour(u, xval, waux, scale, L) < 0)
    fail("{} quantize: no finite grid candidate (values too large)", name);
  return false;
}

void fit(const float* xval, const float* weight, const int8_t* L, float* sumqx, float* sumq2) {
  float sx = 0, s2 = 0;
  for (int i = 0; i < 16; ++i) {
    const float w = weight[i];
    const float q = static_cast<float>(2 * L[i] + 1);
    sx += w * xval[i] * q;
    s2 += w * q * q;
  }
  *sumqx = sx;
  *sumq2 = s2;
}

// One 16-weight sub-block: false when it is all zero (nothing is stored, scale 0); else
// writes its scale, the grid indices and the sign bytes of its two groups.
bool quantize_sub_block(const Variant& v, const GridSearch& g, const float* xb, const float* weight, float* out_scale,
                        int idx[2], uint8_t signs[2]) {
  float xval[16], waux[16];
  int8_t L[16] = {}, Laux[16];
  for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 2; ++k) {
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
  for (int i = 1; i < 16; ++i) max = max > xval[i] ? max : xval[i];
  *out_scale = 0;
  if (max < v.zero_eps) return false;

  float best = 0;
  float scale = max / (2 * kLevels - 1);
  bool on_grid[2] = {true, true};
  for (int is = -9; is <= 9; ++is) {
    const float id = (2 * kLevels - 1 + is * 0.1f) / max;
    const float this_scale = 1 / id;
    bool on_aux[2];
    for (int k = 0; k < 2; ++k)
      on_aux[k] = round_group(g, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k, v.name);
    float sumqx, sumq2;
    fit(xval, weight, Laux, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, sizeof L);
      on_grid[0] = on_aux[0];
      on_grid[1] = on_aux[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 2; ++k)
      if (!on_grid[k]) round_group(g, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k, v.name);
    float sumqx, sumq2;
    fit(xval, weight, L, &sumqx, &sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {  // unreachable for valid input (ggml keeps the guard): |scale|, signs flipped
    scale = -scale;
    for (int k = 0; k < 2; ++k) signs[k] = static_cast<uint8_t>(v.parity_signs ? ~signs[k] & 127 : ~signs[k]);
  }
  if (!(scale >= 0)) fail("{} quantize: sub-block scale is not a number", v.name);
  for (int k = 0; k < 2; ++k) {
    const int32_t gi = g.map[g.key(L + 8 * k)];
    if (gi < 0) fail("{} quantize: levels off the grid (ggml aborts here)", v.name);
    idx[k] = gi;
  }
  *out_scale = scale;
  return true;
}

// The 16 sub-block weights and scales of one super-block; returns max_scale.
template <class Store>
float quantize_super_block(const Variant& v, const float* xbl, const float* qwbl, float* scales, Store store) {
  const GridSearch& g = v.grid();
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  if (!std::isfinite(sumx2)) fail("{} quantize: values too large (sum of squares overflows float)", v.name);
  const float sigma2 = v.sigma_twice ? 2 * sumx2 / kQK_K : sumx2 / kQK_K;
  float max_scale = 0;
  float weight[16];
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    const float* xb = xbl + 16 * ib;
    if (qwbl) {
      for (int i = 0; i < 16; ++i) weight[i] = qwbl[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
    }
    for (int i = 0; i < 16; ++i)
      if (!std::isfinite(weight[i])) fail("{} quantize: importance weight overflows float", v.name);
    int idx[2];
    uint8_t signs[2];
    float s;
    const bool stored = quantize_sub_block(v, g, xb, weight, &s, idx, signs);
    scales[ib] = s;
    if (!stored) continue;  // all-zero sub-block: nothing stored (ggml leaves zeros)
    store(ib, idx, signs);
    max_scale = max_scale > s ? max_scale : s;
  }
  return max_scale;
}

// 4-bit sub-block scale s with scale ~ d*(2s+1), two per byte.
void pack_scales(const float* scales, float d, uint8_t* out) {
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    const int l = clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
    if (ib % 2 == 0)
      out[ib / 2] = static_cast<uint8_t>(l);
    else
      out[ib / 2] = static_cast<uint8_t>(out[ib / 2] | (l << 4));
  }
}

void check_scale(uint16_t h, float d, const char* name) {
  if ((h & 0x7fff) >= 0x7c00) fail("{} quantize: block scale {} exceeds the f16 range", name, d);
}

const Variant kXs{"IQ2_XS", iq2xs_search, true, false, 1e-15f};
const Variant kS{"IQ2_S", iq2s_search, false, true, 1e-8f};

}  // namespace

size_t quantize_iq2_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!imatrix)
    fail("IQ2_XS quantize: an importance matrix is required (ggml asserts \"missing quantization weights\")");
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ2_XS*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockIQ2_XS& y = out[r * nb + b];
      uint16_t q2[kQK_K / 8] = {};
      float scales[kQK_K / 16];
      const float max_scale = quantize_super_block(
          kXs, src + r * n_per_row + b * kQK_K, imatrix + b * kQK_K, scales, [&](int ib, const int* idx, const uint8_t* s) {
            for (int k = 0; k < 2; ++k) q2[2 * ib + k] = static_cast<uint16_t>(idx[k] | (s[k] << 9));
          });
      std::memset(&y, 0, sizeof y);
      if (!max_scale) continue;
      const float d = max_scale / 31;
      y.d = fp32_to_fp16(d);
      check_scale(y.d, d, kXs.name);
      pack_scales(scales, d, y.scales);
      std::memcpy(y.qs, q2, sizeof q2);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ2_XS);
}

size_t quantize_iq2_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ2_S*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockIQ2_S& y = out[r * nb + b];
      std::memset(&y, 0, sizeof y);
      float scales[kQK_K / 16];
      const float max_scale = quantize_super_block(
          kS, src + r * n_per_row + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, scales,
          [&](int ib, const int* idx, const uint8_t* s) {
            for (int k = 0; k < 2; ++k) {
              const int i8 = 2 * ib + k;
              y.qs[i8] = static_cast<uint8_t>(idx[k] & 255);
              y.qh[i8 / 4] = static_cast<uint8_t>(y.qh[i8 / 4] | ((idx[k] >> 8) << (2 * (i8 % 4))));
              y.qs[kQK_K / 8 + i8] = s[k];
            }
          });
      if (!max_scale) continue;
      const float d = max_scale / 31;
      y.d = fp32_to_fp16(d * 0.9875f);
      check_scale(y.d, d, kS.name);
      pack_scales(scales, d, y.scales);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ2_S);
}

}  // namespace ds4::quant
