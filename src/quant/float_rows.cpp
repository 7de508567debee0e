// F16 and BF16 rows: conversions (the per-element rules live in core/fp16.h and match ggml's
// scalar converters bit for bit) and the portable float dot products.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/kernels.h"
#include "quant/lane_sum.h"

namespace ds4::quant {

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

namespace {

// Element i goes to partial sum i % 8: shorter addition chains (error grows with n/8, not n)
// and the same shape the AVX2 kernels use, though those add in a different order.
template <class Load>
float dot_lanes(const float* x, int64_t n, Load weight) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += weight(i + l) * x[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += weight(i) * x[i];
  return fold_lanes8(acc);
}

}  // namespace

float vec_dot_f32_f32_scalar(const void* w, const void* x, int64_t n) {
  const auto* wf = static_cast<const float*>(w);
  return dot_lanes(static_cast<const float*>(x), n, [wf](int64_t i) { return wf[i]; });
}

float vec_dot_f16_f32_scalar(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  return dot_lanes(static_cast<const float*>(x), n, [wh](int64_t i) { return fp16_to_fp32(wh[i]); });
}

float vec_dot_bf16_f32_scalar(const void* w, const void* x, int64_t n) {
  const auto* wh = static_cast<const uint16_t*>(w);
  return dot_lanes(static_cast<const float*>(x), n, [wh](int64_t i) { return bf16_to_fp32(wh[i]); });
}

void axpy_f32_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];  // no FMA: -ffp-contract=off
}

void fma_f32_rows_scalar(const float* a, const float* const* rows, int64_t count, float* y, int64_t n) {
  for (int64_t k = 0; k < count; ++k)
    for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a[k], rows[k][i], y[i]);
}

}  // namespace ds4::quant
