// Q2_K and Q4_K: dequantize, quantize (ggml's reference and importance-weighted writers,
// reproduced byte for byte) and the scalar dot products against Q8_K activations.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/k_quant_search.h"
#include "quant/kernels.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

// Re-derives the codes from the stored (f16-rounded) scales, as both writers do last.
// Sub-blocks whose effective scale is zero keep the codes from the search.
void requantize_sub_block(const float* x, int n, float d, float dm, int nmax, uint8_t* L) {
  if (!d) return;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clamp_int(nearest_int((x[i] + dm) / d), 0, nmax));
}

// Q2_K packing: byte t of 32-byte half h holds codes of weights 128h + t + 32s at bits 2s.
void pack_q2_codes(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q4_K packing: byte t of 32-byte chunk c holds weight 64c + t (low) and 64c + 32 + t (high).
void pack_q4_codes(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 64, qs += 32)
    for (int l = 0; l < 32; ++l) qs[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

void quantize_block_q2_K_ref(const float* x, BlockQ2_K* y) {
  uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.f;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = search_scale_min_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    y->d = fp32_to_fp16(max_scale / q4scale);
  } else {
    std::memset(y->scales, 0, sizeof y->scales);
    y->d = fp32_to_fp16(0.f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) y->scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
    y->dmin = fp32_to_fp16(max_min / q4scale);
  } else {
    y->dmin = fp32_to_fp16(0.f);
  }
  const float d = fp16_to_fp32(y->d), dmin = fp16_to_fp32(y->dmin);
  for (int j = 0; j < 16; ++j)
    requantize_sub_block(x + 16 * j, 16, d * (y->scales[j] & 0xF), dmin * (y->scales[j] >> 4), 3, L + 16 * j);
  pack_q2_codes(L, y->qs);
}

void quantize_block_q2_K_weighted(const float* x, BlockQ2_K* y, const float* qw) {
  uint8_t L[kQK_K], Laux[16], Ls[16], Lm[16];
  float mins[16], scales[16], sw[16] = {}, weight[16];
  float sumx2 = 0;
  for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    for (int l = 0; l < 16; ++l) sw[j] += weight[l];
    scales[j] = search_scale_min_qkx3(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
  }
  y->d = fp32_to_fp16(search_scale_qp(16, 15, scales, Ls, sw));
  y->dmin = fp32_to_fp16(search_scale_qp(16, 15, mins, Lm, sw));
  const float dm = fp16_to_fp32(y->d), mm = fp16_to_fp32(y->dmin);
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
  for (int j = 0; j < 16; ++j)
    requantize_sub_block(x + 16 * j, 16, dm * (y->scales[j] & 0xF), mm * (y->scales[j] >> 4), 3, L + 16 * j);
  pack_q2_codes(L, y->qs);
}

// Final step of both Q4_K writers, once y->d, y->dmin and y->scales are set: re-rounds every
// value against the stored (fp16, 6-bit) scale and min, then packs the 4-bit codes.
void requantize_q4_K_codes(const float* x, BlockQ4_K* y, uint8_t* L) {
  const float d = fp16_to_fp32(y->d), dmin = fp16_to_fp32(y->dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y->scales, &sc, &m);
    requantize_sub_block(x + 32 * j, 32, d * sc, dmin * m, 15, L + 32 * j);
  }
  pack_q4_codes(L, y->qs);
}

void quantize_block_q4_K_ref(const float* x, BlockQ4_K* y) {
  uint8_t L[kQK_K], Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = search_scale_min_qkx2(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    pack_scale_min6(j, ls, lm, y->scales);
  }
  y->d = fp32_to_fp16(max_scale / 63.f);
  y->dmin = fp32_to_fp16(max_min / 63.f);
  requantize_q4_K_codes(x, y, L);
}

void quantize_block_q4_K_weighted(const float* x, BlockQ4_K* y, const float* qw) {
  uint8_t L[kQK_K], Laux[32], Ls[8], Lm[8];
  float weights[32], sw[8], mins[8], scales[8];
  float sum_x2 = 0;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = search_scale_min_qkx3(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
  }
  const float d_block = search_scale_qp(8, 63, scales, Ls, sw);
  const float m_block = search_scale_qp(8, 63, mins, Lm, sw);
  for (int j = 0; j < 8; ++j) pack_scale_min6(j, Ls[j], Lm[j], y->scales);
  y->d = fp32_to_fp16(d_block);
  y->dmin = fp32_to_fp16(m_block);
  requantize_q4_K_codes(x, y, L);
}

}  // namespace

void dequantize_row_q2_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    float* y = dst + i * kQK_K;
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b[i].scales[8 * h + 2 * s + half];
          const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
          const uint8_t* q = b[i].qs + 32 * h + 16 * half;
          for (int t = 0; t < 16; ++t) *y++ = dl * ((q[t] >> (2 * s)) & 3) - ml;
        }
  }
}

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    float* y = dst + i * kQK_K;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      q4k_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* q = b[i].qs + 32 * c;
      for (int t = 0; t < 32; ++t) *y++ = d1 * (q[t] & 0xF) - m1;
      for (int t = 0; t < 32; ++t) *y++ = d2 * (q[t] >> 4) - m2;
    }
  }
}

size_t quantize_q2_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_blocks256<BlockQ2_K>(src, dst, nrows, n_per_row, imatrix, quantize_block_q2_K_ref,
                                    quantize_block_q2_K_weighted);
}

size_t quantize_q4_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_blocks256<BlockQ4_K>(src, dst, nrows, n_per_row, imatrix, quantize_block_q4_K_ref,
                                    quantize_block_q4_K_weighted);
}

// Per block: isum = sum_j sc_j * (q . q8 over sub-block j), summs = sum_j m_j * bsum_j, and the
// block adds d8*d*isum - d8*dmin*summs into lane (block % 8). The AVX2 kernel computes the
// same integers and the same float expression, so the results are identical.
float vec_dot_q2_K_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
    int isum = 0;
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int half = 0; half < 2; ++half) {
          const uint8_t* q2 = x[i].qs + 32 * h + 16 * half;
          const int8_t* q8 = y[i].qs + 128 * h + 32 * s + 16 * half;
          int sub = 0;
          for (int t = 0; t < 16; ++t) sub += q8[t] * ((q2[t] >> (2 * s)) & 3);
          isum += (x[i].scales[8 * h + 2 * s + half] & 0xF) * sub;
        }
    const float dall = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * fp16_to_fp32(x[i].dmin);
    acc[i % kLanes] += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return fold_lanes8(acc);
}

float vec_dot_q4_K_q8_K_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, x[i].scales, &sc, &m);
      summs += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      const uint8_t* q4 = x[i].qs + 32 * (j / 2);
      const int8_t* q8 = y[i].qs + 32 * j;
      const int shift = 4 * (j % 2);
      int sub = 0;
      for (int t = 0; t < 32; ++t) sub += q8[t] * ((q4[t] >> shift) & 0xF);
      isum += sc * sub;
    }
    const float dall = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * fp16_to_fp32(x[i].dmin);
    acc[i % kLanes] += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return fold_lanes8(acc);
}

}  // namespace ds4::quant
