// IQ1_S and IQ1_M writers: ggml's quantize_iq1_s / quantize_iq1_m, byte for byte.
//
// Both code weights as d * s_j * (q + delta), q in {-1, 0, 1} from a 2048-point lattice of
// 8-vectors, with a per-group shift delta = +-1/8. Per sub-block (IQ1_S: 32 weights, one
// shift; IQ1_M: 16 weights, one shift per 8) the three-level assignment is solved exactly:
// weights are sorted by value, and for every split (i1, i2) of the sorted order into
// {-1, 0, +1} and every shift choice the weighted least-squares scale and score follow from
// prefix sums; the best split wins. Vectors that are not lattice points are then snapped to
// their best precomputed neighbour and the scale refitted. IQ1_M finally refits the
// super-block scale over the whole block. Stored scales carry ggml's fudge factors (1.125,
// 1.1125).
//
// The sort: ggml calls qsort with a comparator that looks at the value only; with glibc's
// qsort (a stable merge sort for arrays this small, glibc <= 2.36 as on Debian 12), equal
// values keep their index order, and tie order changes the prefix sums' roundings. The writer
// sorts stably, i.e. reproduces ggml as linked against that C library.
//
// Float determinism: every expression is evaluated as written, one rounding per operation
// (ds4_quant is built with -ffp-contract=off), as in ggml's baseline x86-64 build.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks_ext.h"
#include "quant/iq_grids.h"
#include "quant/iq_search.h"
#include "quant/k_quant_search.h"
#include "quant/kernels_ext.h"

namespace ds4::quant {
namespace {

// q + delta for levels 0, 1, 2 (q = -1, 0, 1) with delta = +1/8 and -1/8.
constexpr float kXp[3] = {-1 + kIq1Delta, kIq1Delta, 1 + kIq1Delta};
constexpr float kXm[3] = {-1 - kIq1Delta, -kIq1Delta, 1 - kIq1Delta};

// Indices 0..n-1 sorted by x (stable: ties in index order, see the header comment).
template <int N>
void sorted_order(const float* x, int* idx) {
  std::iota(idx, idx + N, 0);
  std::stable_sort(idx, idx + N, [x](int a, int b) { return x[a] < x[b]; });
}

// ggml's iq1_find_best_neighbour2: among the neighbours of off-grid key u, the point with the
// smallest weighted error sum w_i (scale * xg[l_i] - x_i)^2 (first on ties); writes its
// levels to L.
int best_neighbour(const GridSearch& g, uint32_t u, const float* x, const float* w, float scale, const float* xg,
                   int8_t* L, const char* name) {
  if (g.map[u] == GridSearch::kUnreachable) fail("{} quantize: level outside the grid's range", name);
  const uint16_t* list = g.neighbours_of(u);
  float best = FLT_MAX;
  int gi = -1;
  for (int j = 1; j <= list[0]; ++j) {
    const uint8_t* lv = &g.level[static_cast<size_t>(list[j]) * 8];
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float q = xg[lv[i]];
      const float diff = scale * q - x[i];
      d2 += w[i] * diff * diff;
    }
    if (d2 < best) {
      best = d2;
      gi = list[j];
    }
  }
  // ggml then scans the whole grid with an out-of-bounds read; only non-finite errors get here.
  if (gi < 0) fail("{} quantize: no finite grid candidate (values too large)", name);
  g.levels_of(gi, L);
  return gi;
}

// Grid index of 8 levels; an off-grid vector is snapped (L updated). *on_grid cleared if so.
int grid_index(const GridSearch& g, int8_t* L, const float* x, const float* w, float scale, const float* xg,
               bool* on_grid, const char* name) {
  const uint32_t u = g.key(L);
  if (g.map[u] >= 0) return g.map[u];
  *on_grid = false;
  return best_neighbour(g, u, x, w, scale, xg, L, name);
}

float block_sigma2(const float* xbl, const char* name) {
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  if (!std::isfinite(sumx2)) fail("{} quantize: values too large (sum of squares overflows float)", name);
  return 2 * sumx2 / kQK_K;
}

template <int N>
void block_weights(const float* xb, const float* qw, float sigma2, float* weight, const char* name) {
  if (qw) {
    for (int i = 0; i < N; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  } else {
    for (int i = 0; i < N; ++i) weight[i] = xb[i] * xb[i];
  }
  for (int i = 0; i < N; ++i)
    if (!std::isfinite(weight[i])) fail("{} quantize: importance weight overflows float", name);
}

template <int N>
float abs_max(const float* xb) {
  float max = std::fabs(xb[0]);
  for (int i = 1; i < N; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
  return max;
}

void check_scale(uint16_t h, float d, const char* name) {
  if ((h & 0x7fff) >= 0x7c00) fail("{} quantize: block scale {} exceeds the f16 range", name, d);
}

// ---- IQ1_S: 8 sub-blocks of 32, one shift each ----

constexpr int kS = 32;

void iq1_s_block(const GridSearch& g, const float* xbl, const float* qwbl, BlockIQ1_S& y) {
  std::memset(&y, 0, sizeof y);
  const float sigma2 = block_sigma2(xbl, "IQ1_S");
  float scales[kQK_K / kS];
  int shifts[kQK_K / kS];
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / kS; ++ib) {
    const float* xb = xbl + kS * ib;
    float weight[kS];
    block_weights<kS>(xb, qwbl + kS * ib, sigma2, weight, "IQ1_S");
    scales[ib] = 0;
    shifts[ib] = 1;
    if (abs_max<kS>(xb) < 1e-12f) continue;
    int idx[kS];
    sorted_order<kS>(xb, idx);
    float sumx[kS + 1], sumw[kS + 1];
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < kS; ++j) {
      const int i = idx[j];
      sumx[j + 1] = sumx[j] + weight[i] * xb[i];
      sumw[j + 1] = sumw[j] + weight[i];
    }
    float best_score = -FLT_MAX, scale = abs_max<kS>(xb);
    int besti1 = -1, besti2 = -1, best_shift = 0;
    for (int i1 = 0; i1 <= kS; ++i1) {
      for (int i2 = i1; i2 <= kS; ++i2) {
        for (int sh = 1; sh >= -1; sh -= 2) {
          const float* v = sh == 1 ? kXp : kXm;
          const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[kS] - sumx[i2]) * v[2];
          const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                              (sumw[kS] - sumw[i2]) * v[2] * v[2];
          if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            scale = sumqx / sumq2;
            best_score = scale * sumqx;
            besti1 = i1;
            besti2 = i2;
            best_shift = sh;
          }
        }
      }
    }
    if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;  // all weights zero
    int8_t L[kS];
    for (int j = 0; j < kS; ++j) L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
    if (scale < 0) {
      for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
      scale = -scale;
      best_shift = -best_shift;
    }
    const float* xx = best_shift == 1 ? kXp : kXm;
    bool on_grid = true;
    int index[kS / 8];
    for (int k = 0; k < kS / 8; ++k)
      index[k] = grid_index(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale, xx, &on_grid, "IQ1_S");
    if (!on_grid) {
      float sumqx = 0, sumq2 = 0;
      for (int k = 0; k < kS / 8; ++k) {
        const uint8_t* lv = &g.level[static_cast<size_t>(index[k]) * 8];
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float q = xx[lv[j]];
          sumqx += w * q * xb[8 * k + j];
          sumq2 += w * q * q;
        }
      }
      if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
    }
    uint16_t h = 0;
    for (int k = 0; k < kS / 8; ++k) {
      y.qs[(kS / 8) * ib + k] = static_cast<uint8_t>(index[k] & 255);
      h = static_cast<uint16_t>(h | ((index[k] >> 8) << (3 * k)));
    }
    y.qh[ib] = h;
    if (!(scale >= 0)) fail("IQ1_S quantize: sub-block scale is not a number");
    scales[ib] = scale;
    shifts[ib] = best_shift;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) return;
  const float d = max_scale / 15;
  y.d = fp32_to_fp16(d * 1.125f);
  check_scale(y.d, d, "IQ1_S");
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / kS; ++ib) {
    int l = clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
    if (shifts[ib] == -1) l |= 8;
    y.qh[ib] = static_cast<uint16_t>(y.qh[ib] | (l << 12));
  }
}

// ---- IQ1_M: 16 sub-blocks of 16, a shift per 8 weights ----

constexpr int kM = 16;

// Shift table of group k (0, 1) for shift code c: 0 = (+,+), 1 = (+,-), 2 = (-,+), 3 = (-,-).
const float* m_values(int c, int k) {
  if (k == 0) return c < 2 ? kXp : kXm;
  return c % 2 == 0 ? kXp : kXm;
}

void iq1_m_block(const GridSearch& g, const float* xbl, const float* qwbl, BlockIQ1_M& y) {
  std::memset(&y, 0, sizeof y);
  const float sigma2 = block_sigma2(xbl, "IQ1_M");
  float scales[kQK_K / kM];
  int shifts[kQK_K / kM];
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / kM; ++ib) {
    const float* xb = xbl + kM * ib;
    float weight[kM];
    block_weights<kM>(xb, qwbl ? qwbl + kM * ib : nullptr, sigma2, weight, "IQ1_M");
    scales[ib] = 0;
    shifts[ib] = 0;
    if (abs_max<kM>(xb) < 1e-7f) continue;
    int idx[kM];
    sorted_order<kM>(xb, idx);
    // Prefix sums per half (each half may take its own shift).
    float px[2][kM + 1], pw[2][kM + 1];
    px[0][0] = px[1][0] = 0;
    pw[0][0] = pw[1][0] = 0;
    for (int j = 0; j < kM; ++j) {
      const int i = idx[j];
      const int h = i < kM / 2 ? 0 : 1;
      px[h][j + 1] = px[h][j] + weight[i] * xb[i];
      px[1 - h][j + 1] = px[1 - h][j];
      pw[h][j + 1] = pw[h][j] + weight[i];
      pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float txs[2] = {px[0][kM], px[1][kM]}, tws[2] = {pw[0][kM], pw[1][kM]};
    const float p2 = kXp[2], m2 = kXm[2];
    const float cp1 = kXp[0] * kXp[0] - kXp[1] * kXp[1], cp2 = kXp[1] * kXp[1] - kXp[2] * kXp[2];
    const float cm1 = kXm[0] * kXm[0] - kXm[1] * kXm[1], cm2 = kXm[1] * kXm[1] - kXm[2] * kXm[2];
    float best_score = -FLT_MAX, scale = abs_max<kM>(xb);
    int besti1 = -1, besti2 = -1, best_k = -1;
    for (int i1 = 0; i1 <= kM; ++i1) {
      for (int i2 = i1; i2 <= kM; ++i2) {
        float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
        for (int h = 0; h < 2; ++h) {
          const float sx = px[h][i1] + px[h][i2];
          qx_p[h] = txs[h] * p2 - sx;
          qx_m[h] = txs[h] * m2 - sx;
          q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
          q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
        }
        const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
        const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
        for (int k = 0; k < 4; ++k) {
          if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
            scale = sumqx[k] / sumq2[k];
            best_score = scale * sumqx[k];
            besti1 = i1;
            besti2 = i2;
            best_k = k;
          }
        }
      }
    }
    if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;  // all weights zero
    int8_t L[kM];
    for (int j = 0; j < kM; ++j) L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
    if (scale < 0) {
      for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
      scale = -scale;
      best_k = 3 - best_k;  // both shifts flip: 0 <-> 3, 1 <-> 2
    }
    bool on_grid = true;
    int index[2];
    for (int k = 0; k < 2; ++k)
      index[k] = grid_index(g, L + 8 * k, xb + 8 * k, weight + 8 * k, scale, m_values(best_k, k), &on_grid, "IQ1_M");
    if (!on_grid) {
      float sumqx = 0, sumq2 = 0;
      for (int k = 0; k < 2; ++k) {
        const float* xx = m_values(best_k, k);
        const uint8_t* lv = &g.level[static_cast<size_t>(index[k]) * 8];
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float q = xx[lv[j]];
          sumqx += w * q * xb[8 * k + j];
          sumq2 += w * q * q;
        }
      }
      if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
    }
    y.qs[2 * ib + 0] = static_cast<uint8_t>(index[0] & 255);
    y.qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
    y.qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
    if (!(scale >= 0)) fail("IQ1_M quantize: sub-block scale is not a number");
    scales[ib] = scale;
    shifts[ib] = best_k;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) return;

  // Sub-block scale codes, shift bits, and a final fit of the super-block scale over every
  // stored weight (sub-blocks left zero decode as grid point 0 and are included, as in ggml).
  static constexpr uint8_t kMasks[4] = {0x00, 0x80, 0x08, 0x88};
  uint16_t sc[4] = {};
  float d = max_scale / 15;
  const float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int ib = 0; ib < kQK_K / kM; ++ib) {
    const int l = clamp_int(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
    sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << (3 * (ib % 4))));
    y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | kMasks[shifts[ib]]);
    const float* xb = xbl + kM * ib;
    float weight[kM];
    block_weights<kM>(xb, qwbl ? qwbl + kM * ib : nullptr, sigma2, weight, "IQ1_M");
    for (int k = 0; k < 2; ++k) {
      const float* xx = m_values(shifts[ib], k);
      const int gi = y.qs[2 * ib + k] + ((y.qh[ib] << (8 - 4 * k)) & 0x700);
      const uint8_t* lv = &g.level[static_cast<size_t>(gi) * 8];
      for (int j = 0; j < 8; ++j) {
        const float w = weight[8 * k + j];
        const float q = xx[lv[j]] * static_cast<float>(2 * l + 1);
        sumqx += w * q * xb[8 * k + j];
        sumq2 += w * q * q;
      }
    }
  }
  if (sumq2 > 0) d = sumqx / sumq2;
  const uint16_t s = fp32_to_fp16(d * 1.1125f);
  check_scale(s, d, "IQ1_M");
  sc[0] = static_cast<uint16_t>(sc[0] | ((s & 0x000f) << 12));
  sc[1] = static_cast<uint16_t>(sc[1] | ((s & 0x00f0) << 8));
  sc[2] = static_cast<uint16_t>(sc[2] | ((s & 0x0f00) << 4));
  sc[3] = static_cast<uint16_t>(sc[3] | (s & 0xf000));
  std::memcpy(y.scales, sc, sizeof sc);
}

}  // namespace

size_t quantize_iq1_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  if (!imatrix)
    fail("IQ1_S quantize: an importance matrix is required (ggml asserts \"missing quantization weights\")");
  const GridSearch& g = iq1s_search();
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ1_S*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b) iq1_s_block(g, src + r * n_per_row + b * kQK_K, imatrix + b * kQK_K, out[r * nb + b]);
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ1_S);
}

size_t quantize_iq1_m(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const GridSearch& g = iq1s_search();
  const int64_t nb = n_per_row / kQK_K;
  auto* out = static_cast<BlockIQ1_M*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      iq1_m_block(g, src + r * n_per_row + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, out[r * nb + b]);
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ1_M);
}

}  // namespace ds4::quant
