// Q3_K, Q5_K and Q6_K: decoders (bit-exact with ggml), ggml's reference and importance-weighted
// writers (byte for byte) and scalar dots against Q8_K (block b's float into lane b % 8).
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks_ext.h"
#include "quant/k_quant_search.h"
#include "quant/kernels_ext.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

// --- Q3_K ---

// Stores the 6-bit code l (0..63) of sub-block j into the 12 packed scale bytes (zeroed first).
void pack_q3_scale(int j, int l, uint8_t* s) {
  if (j < 8)
    s[j] = static_cast<uint8_t>(l & 0xF);
  else
    s[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
  s[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
}

// Shared tail of both Q3_K writers: codes from the stored scales, then hmask and qs.
void finish_q3_K(const float* x, BlockQ3_K* y, int8_t* L) {
  int sc[16];
  q3k_scales(y->scales, sc);
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y->d) * static_cast<float>(sc[j] - 32);
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
  }
  std::memset(y->hmask, 0, sizeof y->hmask);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kQK_K; ++j) {
    if (L[j] > 3) {
      y->hmask[m] |= hm;
      L[j] = static_cast<int8_t>(L[j] - 4);
    }
    if (++m == kQK_K / 8) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      y->qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void quantize_block_q3_K_ref(const float* x, BlockQ3_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = search_scale_q3(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) amax = scale, max_scale = scales[j];
  }
  std::memset(y->scales, 0, sizeof y->scales);
  if (max_scale) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      // ggml keeps the rounded value in an int8_t before clamping.
      const int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      pack_q3_scale(j, static_cast<int8_t>(clamp_int(l, -32, 31) + 32), y->scales);
    }
    y->d = fp32_to_fp16(1 / iscale);
  } else {
    y->d = fp32_to_fp16(0.f);
  }
  finish_q3_K(x, y, L);
}

void quantize_block_q3_K_weighted(const float* x, BlockQ3_K* y, const float* qw) {
  int8_t L[kQK_K], Ls[16];
  float scales[16], weight[16], sw[16];
  float sumx2 = 0;
  for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = 2 * sumx2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 16; ++l) sumw += weight[l];
    sw[j] = sumw;
    scales[j] = search_scale_qx(16, 4, x + 16 * j, L + 16 * j, weight);
  }
  std::memset(y->scales, 0, sizeof y->scales);
  const float d_block = search_scale_qx(16, 32, scales, Ls, sw);
  for (int j = 0; j < 16; ++j) pack_q3_scale(j, Ls[j], y->scales);
  y->d = fp32_to_fp16(d_block);
  finish_q3_K(x, y, L);
}

// --- Q5_K ---

void finish_q5_K(const float* x, BlockQ5_K* y, uint8_t* L) {
  const float dd = fp16_to_fp32(y->d), dm = fp16_to_fp32(y->dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y->scales, &sc, &m);
    const float d = dd * sc;
    if (!d) continue;
    const float dmj = dm * m;
    for (int ii = 0; ii < 32; ++ii) L[32 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dmj) / d), 0, 31));
  }
  std::memset(y->qh, 0, sizeof y->qh);
  uint8_t* ql = y->qs;
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK_K; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) l1 -= 16, y->qh[j] |= m1;
      if (l2 > 15) l2 -= 16, y->qh[j] |= m2;
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
    ql += 32;
  }
}

void quantize_block_q5_K_ref(const float* x, BlockQ5_K* y) {
  uint8_t L[kQK_K], Laux[32];
  float mins[8], scales[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = search_scale_min_qkx2(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    pack_scale_min6(j, ls < 63 ? ls : 63, lm < 63 ? lm : 63, y->scales);
  }
  y->d = fp32_to_fp16(max_scale / 63.f);
  y->dmin = fp32_to_fp16(max_min / 63.f);
  finish_q5_K(x, y, L);
}

void quantize_block_q5_K_weighted(const float* x, BlockQ5_K* y, const float* qw) {
  uint8_t L[kQK_K], Laux[32], Ls[8], Lm[8];
  float mins[8], scales[8], sw[8], weights[32];
  float sum_x2 = 0;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = search_scale_min_qkx3(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
  }
  const float d_block = search_scale_qp(8, 63, scales, Ls, sw);
  const float m_block = search_scale_qp(8, 63, mins, Lm, sw);
  for (int j = 0; j < 8; ++j) pack_scale_min6(j, Ls[j] < 63 ? Ls[j] : 63, Lm[j] < 63 ? Lm[j] : 63, y->scales);
  y->d = fp32_to_fp16(d_block);
  y->dmin = fp32_to_fp16(m_block);
  finish_q5_K(x, y, L);
}

// --- Q6_K ---

void quantize_block_q6_K(const float* x, BlockQ6_K* y, const float* qw) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = search_scale_qx(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : nullptr);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) max_abs_scale = std::fabs(scale), max_scale = scale;
  }
  if (max_abs_scale < 1e-15f) {
    std::memset(y, 0, sizeof *y);
    y->d = fp32_to_fp16(0.f);
    return;
  }
  const float iscale = -128.f / max_scale;
  y->d = fp32_to_fp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    const int v = nearest_int(iscale * scales[ib]);
    y->scales[ib] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = fp16_to_fp32(y->d) * y->scales[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
  }
  uint8_t* ql = y->ql;
  uint8_t* qh = y->qh;
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

}  // namespace

void dequantize_row_q3_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = fp16_to_fp32(b[i].d);
    int sc[16];
    q3k_scales(b[i].scales, sc);
    float* y = dst + i * kQK_K;
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(sc[8 * h + 2 * s + half] - 32);
          const uint8_t* q = b[i].qs + 32 * h + 16 * half;
          const uint8_t* hm = b[i].hmask + 16 * half;
          const int bit = 4 * h + s;
          for (int t = 0; t < 16; ++t)
            *y++ = dl * static_cast<float>(((q[t] >> (2 * s)) & 3) - (((hm[t] >> bit) & 1) ? 0 : 4));
        }
  }
}

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    float* y = dst + i * kQK_K;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      q4k_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* ql = b[i].qs + 32 * c;
      for (int t = 0; t < 32; ++t) *y++ = d1 * static_cast<float>((ql[t] & 0xF) + (((b[i].qh[t] >> (2 * c)) & 1) ? 16 : 0)) - m1;
      for (int t = 0; t < 32; ++t) *y++ = d2 * static_cast<float>((ql[t] >> 4) + (((b[i].qh[t] >> (2 * c + 1)) & 1) ? 16 : 0)) - m2;
    }
  }
}

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int e = 0; e < kQK_K; ++e)
      dst[i * kQK_K + e] = d * b[i].scales[e / 16] * static_cast<float>(q6k_code(b[i], e) - 32);
  }
}

size_t quantize_q3_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_blocks256<BlockQ3_K>(src, dst, nrows, n_per_row, imatrix, quantize_block_q3_K_ref, quantize_block_q3_K_weighted);
}

size_t quantize_q5_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_blocks256<BlockQ5_K>(src, dst, nrows, n_per_row, imatrix, quantize_block_q5_K_ref, quantize_block_q5_K_weighted);
}

size_t quantize_q6_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_blocks256<BlockQ6_K>(
      src, dst, nrows, n_per_row, imatrix, [](const float* x, BlockQ6_K* y) { quantize_block_q6_K(x, y, nullptr); },
      [](const float* x, BlockQ6_K* y, const float* qw) { quantize_block_q6_K(x, y, qw); });
}

float vec_dot_q3_K_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[16];
    q3k_scales(x[i].scales, sc);
    int isum = 0;
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int half = 0; half < 2; ++half) {
          const uint8_t* q = x[i].qs + 32 * h + 16 * half;
          const uint8_t* hm = x[i].hmask + 16 * half;
          const int8_t* q8 = y[i].qs + 128 * h + 32 * s + 16 * half;
          const int bit = 4 * h + s;
          int sub = 0;
          for (int t = 0; t < 16; ++t) sub += q8[t] * (((q[t] >> (2 * s)) & 3) - (((hm[t] >> bit) & 1) ? 0 : 4));
          isum += (sc[8 * h + 2 * s + half] - 32) * sub;
        }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_K_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, x[i].scales, &sc, &m);
      summs += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      const uint8_t* ql = x[i].qs + 32 * (j / 2);
      const int8_t* q8 = y[i].qs + 32 * j;
      const int shift = 4 * (j % 2);
      int sub = 0;
      for (int t = 0; t < 32; ++t) sub += q8[t] * (((ql[t] >> shift) & 0xF) | (((x[i].qh[t] >> j) & 1) << 4));
      isum += sc * sub;
    }
    const float dall = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * fp16_to_fp32(x[i].dmin);
    acc[i % kLanes] += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return fold_lanes8(acc);
}

float vec_dot_q6_K_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int g = 0; g < 16; ++g) {
      int sub = 0;
      for (int t = 0; t < 16; ++t) sub += y[i].qs[16 * g + t] * (q6k_code(x[i], 16 * g + t) - 32);
      isum += x[i].scales[g] * sub;
    }
    acc[i % kLanes] += (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum);
  }
  return fold_lanes8(acc);
}

}  // namespace ds4::quant
