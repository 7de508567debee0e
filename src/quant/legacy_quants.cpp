// The 32-weight block formats: Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4 (and the Q8_1 activations of
// Q5_1's dot product). Decoders equal ggml's bit for bit; the Q4_0/Q5_0/Q5_1 writers are
// ggml's reference and importance-weighted ones, byte for byte. The scalar dots add block b's
// float into lane b % 8 (lane_sum.h), which the AVX2 kernels reproduce exactly.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks_ext.h"
#include "quant/iq_grids.h"
#include "quant/k_quant_search.h"
#include "quant/kernels_ext.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 5-bit code of weight j (0..31) of a Q5_0/Q5_1 block.
int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

// ggml stores (int8_t)(v + 8.5f) and the like; for finite rows v is within the int8 range.
int trunc_i8(float v) { return static_cast<int8_t>(static_cast<int>(v)); }

void pack_q5(const uint8_t* L, uint8_t* qs, uint8_t* qh_out) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t a = L[j], b = L[j + 16];
    qs[j] = static_cast<uint8_t>((a & 0x0F) | ((b & 0x0F) << 4));
    qh |= ((a & 0x10u) >> 4) << j;
    qh |= ((b & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}

void quantize_block_q4_0_ref(const float* x, BlockQ4_0* y) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -8;
  const float id = d ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  for (int j = 0; j < 16; ++j) {
    const int a = trunc_i8(x[j] * id + 8.5f), b = trunc_i8(x[j + 16] * id + 8.5f);
    y->qs[j] = static_cast<uint8_t>((a < 15 ? a : 15) | ((b < 15 ? b : 15) << 4));
  }
}

void quantize_block_q5_0_ref(const float* x, BlockQ5_0* y) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -16;
  const float id = d ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  uint8_t L[kQK32];
  for (int j = 0; j < kQK32; ++j) {
    const int v = trunc_i8(x[j] * id + 16.5f);
    L[j] = static_cast<uint8_t>(v < 31 ? v : 31);
  }
  pack_q5(L, y->qs, y->qh);
}

void quantize_block_q5_1_ref(const float* x, BlockQ5_1* y) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kQK32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 31;
  const float id = d ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  y->m = fp32_to_fp16(min);
  uint8_t L[kQK32];
  for (int j = 0; j < kQK32; ++j) L[j] = static_cast<uint8_t>(static_cast<int>((x[j] - min) * id + 0.5f));
  pack_q5(L, y->qs, y->qh);
}

// The weighted writers work per row: sigma2 is the row's mean square.
float row_sigma2(const float* x, int64_t n) {
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s / static_cast<float>(n);
}

void block_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < kQK32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

template <class Block, class Ref, class Weighted>
size_t quantize_rows32(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix, Ref ref,
                       Weighted weighted) {
  auto* out = static_cast<Block*>(dst);
  const int64_t nb = n_per_row / kQK32;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = src + r * n_per_row;
    const float sigma2 = imatrix ? row_sigma2(x, n_per_row) : 0.f;
    for (int64_t i = 0; i < nb; ++i) {
      if (imatrix)
        weighted(x + i * kQK32, imatrix + i * kQK32, sigma2, out + r * nb + i);
      else
        ref(x + i * kQK32, out + r * nb + i);
    }
  }
  return static_cast<size_t>(nrows * nb) * sizeof(Block);
}

}  // namespace

// --- decoders ---

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[32 * i + j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      dst[32 * i + j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK32; ++j) dst[32 * i + j] = static_cast<float>(q5_code(b[i].qs, qh, j) - 16) * d;
  }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK32; ++j) dst[32 * i + j] = static_cast<float>(q5_code(b[i].qs, qh, j)) * d + m;
  }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK32; ++j) dst[32 * i + j] = b[i].qs[j] * d;
  }
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[32 * i + j] = d * kvalues_iq4nl[b[i].qs[j] & 0xF];
      dst[32 * i + j + 16] = d * kvalues_iq4nl[b[i].qs[j] >> 4];
    }
  }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float d = e8m0_half(b[i].e);
    for (int j = 0; j < 16; ++j) {
      dst[32 * i + j] = kvalues_mxfp4[b[i].qs[j] & 0xF] * d;
      dst[32 * i + j + 16] = kvalues_mxfp4[b[i].qs[j] >> 4] * d;
    }
  }
}

// --- writers ---

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const float* x = src + i * kQK32;
    float amax = 0;
    for (int j = 0; j < kQK32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK32; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      sum += b[i].qs[j];
    }
    b[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

size_t quantize_q4_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows32<BlockQ4_0>(src, dst, nrows, n_per_row, imatrix, quantize_block_q4_0_ref,
                                    [](const float* x, const float* qw, float sigma2, BlockQ4_0* y) {
                                      float w[kQK32];
                                      int8_t L[kQK32];
                                      block_weights(x, qw, sigma2, w);
                                      y->d = fp32_to_fp16(search_scale_qx(kQK32, 8, x, L, w));
                                      for (int j = 0; j < 16; ++j) y->qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
                                    });
}

size_t quantize_q5_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows32<BlockQ5_0>(src, dst, nrows, n_per_row, imatrix, quantize_block_q5_0_ref,
                                    [](const float* x, const float* qw, float sigma2, BlockQ5_0* y) {
                                      float w[kQK32];
                                      int8_t L[kQK32];
                                      block_weights(x, qw, sigma2, w);
                                      y->d = fp32_to_fp16(search_scale_qx(kQK32, 16, x, L, w));
                                      pack_q5(reinterpret_cast<const uint8_t*>(L), y->qs, y->qh);
                                    });
}

size_t quantize_q5_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  return quantize_rows32<BlockQ5_1>(src, dst, nrows, n_per_row, imatrix, quantize_block_q5_1_ref,
                                    [](const float* x, const float* qw, float sigma2, BlockQ5_1* y) {
                                      float w[kQK32], min = 0;
                                      uint8_t L[kQK32], Laux[kQK32];
                                      block_weights(x, qw, sigma2, w);
                                      const float d = search_scale_min_qkx3(kQK32, 31, x, w, L, &min, Laux, -0.9f, 0.05f, 36);
                                      y->d = fp32_to_fp16(d);
                                      y->m = fp32_to_fp16(-min);
                                      pack_q5(L, y->qs, y->qh);
                                    });
}

// ggml's quantize_row_mxfp4_ref: shared exponent floor(log2(amax)) - 2 (so the largest E2M1
// value 6 covers amax), then each weight to the nearest of the 16 E2M1 values (the first on
// ties). log2 is the C library's log2f, as in ggml. The exponent byte is ggml's float ->
// uint8_t conversion, which on x86 truncates to int and keeps the low byte (it wraps for
// amax < 2^-125: ggml's bytes, reproduced).
size_t quantize_mxfp4(const float* src, void* dst, int64_t nrows, int64_t n_per_row) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  const int64_t nb = nrows * (n_per_row / kQK32);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + kQK32 * i;
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127) & 0xff) : 0;
    const float d = e8m0_half(e);
    auto best = [d](float v) {
      int bi = 0;
      float berr = std::fabs(kvalues_mxfp4[0] * d - v);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(kvalues_mxfp4[k] * d - v);
        if (err < berr) {
          bi = k;
          berr = err;
        }
      }
      return bi;
    };
    y[i].e = e;
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(best(x[j]) | (best(x[j + 16]) << 4));
  }
  return static_cast<size_t>(nb) * sizeof(BlockMXFP4);
}

// --- scalar dots ---

float vec_dot_q4_0_q8_0_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j)
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    acc[i % kLanes] += static_cast<float>(sumi) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_0_q8_0_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK32; ++j) sumi += (q5_code(x[i].qs, qh, j) - 16) * y[i].qs[j];
    acc[i % kLanes] += static_cast<float>(sumi) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_q5_1_q8_1_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK32; ++j) sumi += q5_code(x[i].qs, qh, j) * y[i].qs[j];
    const float dd = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    acc[i % kLanes] += dd * static_cast<float>(sumi) + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return fold_lanes8(acc);
}

float vec_dot_iq4_nl_q8_0_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j)
      sumi += kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
    acc[i % kLanes] += static_cast<float>(sumi) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return fold_lanes8(acc);
}

float vec_dot_mxfp4_q8_0_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j)
      sumi += kvalues_mxfp4[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
    acc[i % kLanes] += static_cast<float>(sumi) * (e8m0_half(x[i].e) * fp16_to_fp32(y[i].d));
  }
  return fold_lanes8(acc);
}

}  // namespace ds4::quant
