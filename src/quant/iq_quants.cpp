// The codebook formats IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and the non-linear IQ4_XS:
// decoders (bit-exact with ggml) and scalar dots against Q8_K. Each dot computes exact
// integer block sums, then adds one float per block into lane b % 8 (lane_sum.h); the AVX2
// kernels compute the same integers and the same float expression.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks_ext.h"
#include "quant/iq2_tables.h"
#include "quant/iq_grids.h"
#include "quant/k_quant_search.h"
#include "quant/kernels_ext.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

inline uint8_t grid_byte(uint64_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }
inline uint8_t grid_byte32(uint32_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }
inline float sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }
inline int isign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

// sum_j grid_j * sign_j * q8_j over 8 weights (unsigned magnitudes, explicit sign bits).
int signed_dot8(uint64_t grid, uint8_t signs, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += grid_byte(grid, j) * isign_of(signs, j) * q8[j];
  return s;
}

int signed_dot4(uint32_t grid, uint8_t signs, int first_bit, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 4; ++j) s += grid_byte32(grid, j) * isign_of(signs, first_bit + j) * q8[j];
  return s;
}

int sum8(const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += q8[j];
  return s;
}

// sum_j grid_j * q8_j for an IQ1 grid point (signed bytes).
int iq1_dot8(uint64_t grid, const int8_t* q8) {
  int s = 0;
  for (int j = 0; j < 8; ++j) s += static_cast<int8_t>(grid_byte(grid, j)) * q8[j];
  return s;
}

uint16_t iq2s_index(const BlockIQ2_S& b, int ib, int l) {
  return static_cast<uint16_t>(b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300));
}

uint16_t iq3s_index(const BlockIQ3_S& b, int ib, int k) {  // k: 0..7, grid point k of sub-block ib
  return static_cast<uint16_t>(b.qs[8 * ib + k] | (((b.qh[ib] >> k) & 1) << 8));
}

uint16_t iq1s_index(const BlockIQ1_S& b, int ib, int l) {
  return static_cast<uint16_t>(b.qs[4 * ib + l] | (((b.qh[ib] >> (3 * l)) & 7) << 8));
}

void iq1m_group(const BlockIQ1_M& b, int ib, uint16_t idx[4], int dsign[4]) {
  const uint8_t* qs = b.qs + 4 * ib;
  const uint8_t* qh = b.qh + 2 * ib;
  idx[0] = static_cast<uint16_t>(qs[0] | ((qh[0] << 8) & 0x700));
  idx[1] = static_cast<uint16_t>(qs[1] | ((qh[0] << 4) & 0x700));
  idx[2] = static_cast<uint16_t>(qs[2] | ((qh[1] << 8) & 0x700));
  idx[3] = static_cast<uint16_t>(qs[3] | ((qh[1] << 4) & 0x700));
  dsign[0] = qh[0] & 0x08 ? -1 : 1;
  dsign[1] = qh[0] & 0x80 ? -1 : 1;
  dsign[2] = qh[1] & 0x08 ? -1 : 1;
  dsign[3] = qh[1] & 0x80 ? -1 : 1;
}

// IQ1_M: the two 3-bit scales (as 2s+1) of sub-block ib.
void iq1m_scales(const BlockIQ1_M& b, int ib, int* ls1, int* ls2) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  const int shift = 6 * (ib % 2);
  *ls1 = 2 * ((sc[ib / 2] >> shift) & 7) + 1;
  *ls2 = 2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1;
}

int iq4xs_scale(const BlockIQ4_XS& b, int ib) {
  return (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

}  // namespace

// ----------------------------------------------------------------------------- decoders

void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ2_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + (b[i].scales[ib] & 0xF)) * 0.25f, d * (0.5f + (b[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = b[i].qs[4 * ib + l];
        const uint64_t g = iq2xs_grid[q & 511];
        const uint8_t signs = ksigns_iq2xs[q >> 9];
        for (int j = 0; j < 8; ++j) *y++ = db[l / 2] * grid_byte(g, j) * sign_of(signs, j);
      }
    }
  }
}

void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ2_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint8_t* signs = b[i].qs + kQK_K / 8;
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + (b[i].scales[ib] & 0xF)) * 0.25f, d * (0.5f + (b[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const uint64_t g = iq2s_grid[iq2s_index(b[i], ib, l)];
        for (int j = 0; j < 8; ++j) *y++ = db[l / 2] * grid_byte(g, j) * sign_of(signs[4 * ib + l], j);
      }
    }
  }
}

void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ3_XXS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint8_t* qs = b[i].qs;
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux;
      std::memcpy(&aux, b[i].qs + kQK_K / 4 + 4 * ib, 4);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = ksigns_iq2xs[(aux >> (7 * l)) & 127];
        const uint32_t g1 = iq3xxs_grid[qs[8 * ib + 2 * l]], g2 = iq3xxs_grid[qs[8 * ib + 2 * l + 1]];
        for (int j = 0; j < 4; ++j) y[j] = db * grid_byte32(g1, j) * sign_of(signs, j);
        for (int j = 0; j < 4; ++j) y[j + 4] = db * grid_byte32(g2, j) * sign_of(signs, j + 4);
        y += 8;
      }
    }
  }
}

void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ3_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t s4 = b[i].scales[ib / 2];
      const float db = d * static_cast<float>(1 + 2 * (ib % 2 ? s4 >> 4 : s4 & 0xF));
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = b[i].signs[4 * ib + l];
        const uint32_t g1 = iq3s_grid[iq3s_index(b[i], ib, 2 * l)], g2 = iq3s_grid[iq3s_index(b[i], ib, 2 * l + 1)];
        for (int j = 0; j < 4; ++j) y[j] = db * grid_byte32(g1, j) * sign_of(signs, j);
        for (int j = 0; j < 4; ++j) y[j + 4] = db * grid_byte32(g2, j) * sign_of(signs, j + 4);
        y += 8;
      }
    }
  }
}

void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ1_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      const float dl = d * static_cast<float>(2 * ((b[i].qh[ib] >> 12) & 7) + 1);
      const float delta = b[i].qh[ib] & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l) {
        const uint64_t g = iq1s_grid[iq1s_index(b[i], ib, l)];
        for (int j = 0; j < 8; ++j) *y++ = dl * (static_cast<float>(static_cast<int8_t>(grid_byte(g, j))) + delta);
      }
    }
  }
}

void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ1_M*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(iq1m_scale_bits(b[i].scales));
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      int ls1, ls2, dsign[4];
      uint16_t idx[4];
      iq1m_scales(b[i], ib, &ls1, &ls2);
      iq1m_group(b[i], ib, idx, dsign);
      const float dl1 = d * static_cast<float>(ls1), dl2 = d * static_cast<float>(ls2);
      for (int l = 0; l < 4; ++l) {
        const uint64_t g = iq1s_grid[idx[l]];
        const float delta = dsign[l] < 0 ? -kIq1Delta : kIq1Delta;
        const float dl = l < 2 ? dl1 : dl2;
        for (int j = 0; j < 8; ++j) *y++ = dl * (static_cast<float>(static_cast<int8_t>(grid_byte(g, j))) + delta);
      }
    }
  }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    float* y = dst + i * kQK_K;
    for (int ib = 0; ib < 8; ++ib) {
      const float dl = d * static_cast<float>(iq4xs_scale(b[i], ib));
      const uint8_t* qs = b[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kvalues_iq4nl[qs[j] & 0xF];
        y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
      }
      y += 32;
    }
  }
}

// ----------------------------------------------------------------------------- dots

float vec_dot_iq2_xs_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls[2] = {2 * (x[i].scales[ib] & 0xF) + 1, 2 * (x[i].scales[ib] >> 4) + 1};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = x[i].qs[4 * ib + l];
        isum += ls[l / 2] * signed_dot8(iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9], y[i].qs + 32 * ib + 8 * l);
      }
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return 0.125f * fold_lanes8(acc);
}

float vec_dot_iq2_s_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* signs = x[i].qs + kQK_K / 8;
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls[2] = {2 * (x[i].scales[ib] & 0xF) + 1, 2 * (x[i].scales[ib] >> 4) + 1};
      for (int l = 0; l < 4; ++l)
        isum += ls[l / 2] * signed_dot8(iq2s_grid[iq2s_index(x[i], ib, l)], signs[4 * ib + l], y[i].qs + 32 * ib + 8 * l);
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return 0.125f * fold_lanes8(acc);
}

float vec_dot_iq3_xxs_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux;
      std::memcpy(&aux, x[i].qs + kQK_K / 4 + 4 * ib, 4);
      const int ls = 2 * static_cast<int>(aux >> 28) + 1;
      int sub = 0;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = ksigns_iq2xs[(aux >> (7 * l)) & 127];
        const int8_t* q8 = y[i].qs + 32 * ib + 8 * l;
        sub += signed_dot4(iq3xxs_grid[x[i].qs[8 * ib + 2 * l]], signs, 0, q8);
        sub += signed_dot4(iq3xxs_grid[x[i].qs[8 * ib + 2 * l + 1]], signs, 4, q8 + 4);
      }
      isum += ls * sub;
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return 0.25f * fold_lanes8(acc);
}

float vec_dot_iq3_s_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t s4 = x[i].scales[ib / 2];
      const int ls = 1 + 2 * (ib % 2 ? s4 >> 4 : s4 & 0xF);
      int sub = 0;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = x[i].signs[4 * ib + l];
        const int8_t* q8 = y[i].qs + 32 * ib + 8 * l;
        sub += signed_dot4(iq3s_grid[iq3s_index(x[i], ib, 2 * l)], signs, 0, q8);
        sub += signed_dot4(iq3s_grid[iq3s_index(x[i], ib, 2 * l + 1)], signs, 4, q8 + 4);
      }
      isum += ls * sub;
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return fold_lanes8(acc);
}

float vec_dot_iq1_s_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
      const int ds = x[i].qh[ib] & 0x8000 ? -1 : 1;
      int sg = 0, sq = 0;
      for (int l = 0; l < 4; ++l) {
        const int8_t* q8 = y[i].qs + 32 * ib + 8 * l;
        sg += iq1_dot8(iq1s_grid[iq1s_index(x[i], ib, l)], q8);
        sq += sum8(q8);
      }
      sumi += ls * sg;
      sumi1 += ls * ds * sq;
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * (static_cast<float>(sumi) + kIq1Delta * static_cast<float>(sumi1));
  }
  return fold_lanes8(acc);
}

float vec_dot_iq1_m_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sumi1 = 0, sumi2 = 0;
    for (int ib = 0; ib < 8; ++ib) {
      int ls1, ls2, dsign[4];
      uint16_t idx[4];
      iq1m_scales(x[i], ib, &ls1, &ls2);
      iq1m_group(x[i], ib, idx, dsign);
      for (int l = 0; l < 4; ++l) {
        const int8_t* q8 = y[i].qs + 32 * ib + 8 * l;
        const int ls = l < 2 ? ls1 : ls2;
        sumi1 += ls * iq1_dot8(iq1s_grid[idx[l]], q8);
        sumi2 += ls * dsign[l] * sum8(q8);
      }
    }
    const float d = fp16_to_fp32(iq1m_scale_bits(x[i].scales)) * y[i].d;
    acc[i % kLanes] += d * (static_cast<float>(sumi1) + kIq1Delta * static_cast<float>(sumi2));
  }
  return fold_lanes8(acc);
}

float vec_dot_iq4_xs_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* qs = x[i].qs + 16 * ib;
      const int8_t* q8 = y[i].qs + 32 * ib;
      int sub = 0;
      for (int j = 0; j < 16; ++j) sub += kvalues_iq4nl[qs[j] & 0xF] * q8[j] + kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
      isum += iq4xs_scale(x[i], ib) * sub;
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return fold_lanes8(acc);
}

// ----------------------------------------------------------------------------- IQ4 writers

namespace {

// Index of the value in the sorted 16-entry table nearest to x (ggml's best_index_int8).
int best_index_iq4(float x) {
  const int8_t* val = kvalues_iq4nl;
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav])
      mu = mav;
    else
      ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// ggml's quantize_row_iq4_nl_impl with ntry = 7, for one super-block of `n` weights in
// sub-blocks of 32 (n == 32: IQ4_NL, one scale; n == 256: IQ4_XS, 6-bit sub-block scales).
// Writes *d (f16 bits), q4 (n/2 bytes) and, for IQ4_XS, the packed scales.
void quantize_iq4_super_block(int n, const float* x, const float* qw, uint16_t* d_out, uint8_t* q4, uint16_t* scales_h,
                              uint8_t* scales_l) {
  constexpr int kBlock = 32, kNtry = 7;
  const int8_t* values = kvalues_iq4nl;
  float weight[kBlock], scales[kQK_K / kBlock];
  uint8_t L[kQK_K];
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / static_cast<float>(n);
  std::memset(q4, 0, static_cast<size_t>(n / 2));
  *d_out = fp32_to_fp16(0.f);
  float max_scale = 0, amax_scale = 0;
  const int nb = n / kBlock;
  for (int ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * kBlock;
    uint8_t* Lb = L + ib * kBlock;
    for (int j = 0; j < kBlock; ++j)
      weight[j] = qw ? qw[ib * kBlock + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j)
      if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), max = xb[j];
    if (amax < 1e-15f) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int l = best_index_iq4(id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -kNtry; itry <= kNtry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const float q = values[best_index_iq4(id * xb[j])], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) amax_scale = std::fabs(d), max_scale = d;
  }
  if (nb > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *d_out = fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < nb; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * static_cast<float>(l);
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < kBlock; ++j) L[ib * kBlock + j] = static_cast<uint8_t>(best_index_iq4(idl * x[ib * kBlock + j]));
      l += 32;
      const uint8_t l_l = static_cast<uint8_t>(l & 0xF), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      *scales_h = static_cast<uint16_t>(*scales_h | (l_h << (2 * (ib % 8))));
    }
  } else {
    *d_out = fp32_to_fp16(scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(best_index_iq4(id * x[j]));
  }
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

}  // namespace

size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  auto* out = static_cast<BlockIQ4_NL*>(dst);
  const int64_t nb = n_per_row / kQK32;
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t i = 0; i < nb; ++i) {
      BlockIQ4_NL& b = out[r * nb + i];
      uint16_t unused_h = 0;
      uint8_t unused_l[4] = {};
      quantize_iq4_super_block(kQK32, src + r * n_per_row + i * kQK32, imatrix ? imatrix + i * kQK32 : nullptr, &b.d, b.qs,
                               &unused_h, unused_l);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ4_NL);
}

size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  auto* out = static_cast<BlockIQ4_XS*>(dst);
  const int64_t nb = n_per_row / kQK_K;
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t i = 0; i < nb; ++i) {
      BlockIQ4_XS& b = out[r * nb + i];
      quantize_iq4_super_block(kQK_K, src + r * n_per_row + i * kQK_K, imatrix ? imatrix + i * kQK_K : nullptr, &b.d, b.qs,
                               &b.scales_h, b.scales_l);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(BlockIQ4_XS);
}

}  // namespace ds4::quant
