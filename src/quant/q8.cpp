// Q8_0 (weights and activations) and Q8_K (activations for the K-quant dot products).
// Quantizers follow ggml's *_ref rules (the deterministic ones used to write model files);
// ggml's AVX2 Q8_0 activation quantizer rounds ties differently and is deliberately not matched.
#include <climits>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/k_quant_search.h"
#include "quant/kernels.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[i * kQK8_0 + j] = b[i].qs[j] * d;
  }
}

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i)
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b[i].d * b[i].qs[j];
}

namespace {

// ggml stores roundf(x*id) straight into an int8_t. For finite rows the value is within
// [-127, 127]; when amax is denormal, id = 1/d overflows to inf and the value is +-inf or
// NaN, where C leaves the conversion undefined and x86 (cvttss2si, then the low byte) gives
// 0. This reproduces those bytes without the undefined conversion; d rounds to an f16 zero
// there, so the block decodes to zeros whatever the quants are.
int8_t rounded_to_i8(float v) {
  const int32_t i = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<int8_t>(i);
}

}  // namespace

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* x = src + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    // roundf (ties away from zero), not rint: that is what the reference writer does.
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = rounded_to_i8(std::roundf(x[j] * id));
  }
}

void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    // The signed value of largest magnitude (first one on ties) maps to -127, so the
    // quants span [-127, 127] and never -128 (the IQ2_XXS AVX2 kernel relies on that).
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      const float a = std::fabs(x[j]);
      if (a > amax) {
        amax = a;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      b[i].d = 0.0f;
      std::memset(b[i].qs, 0, sizeof b[i].qs);
      std::memset(b[i].bsums, 0, sizeof b[i].bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      b[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += b[i].qs[16 * j + k];
      b[i].bsums[j] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

float vec_dot_q8_0_q8_0_scalar(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float acc[kLanes] = {};
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    const float dd = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    acc[i % kLanes] += static_cast<float>(sumi) * dd;
  }
  return fold_lanes8(acc);
}

}  // namespace ds4::quant
