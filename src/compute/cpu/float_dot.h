#pragma once
// Dot products of f32 activations with F32/F16/BF16 weight rows. Eight independent partial
// sums let the compiler vectorize without -ffast-math; the summation order is fixed, so a row
// gives the same result in every batch.
#include <cstdint>

#include "core/fp16.h"
#include "quant/types.h"

namespace ds4::compute {

template <class Load>
inline float dot8(const float* x, int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += load(i + k) * x[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += load(i) * x[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

inline float float_dot_f32(const float* a, const float* b, int64_t n) {
  return dot8(b, n, [a](int64_t i) { return a[i]; });
}

inline float float_row_dot(GgmlType t, const uint8_t* row, const float* x, int64_t n) {
  switch (t) {
    case GgmlType::F32: return float_dot_f32(reinterpret_cast<const float*>(row), x, n);
    case GgmlType::F16: {
      const auto* w = reinterpret_cast<const uint16_t*>(row);
      return dot8(x, n, [w](int64_t i) { return fp16_to_fp32(w[i]); });
    }
    case GgmlType::BF16: {
      const auto* w = reinterpret_cast<const uint16_t*>(row);
      return dot8(x, n, [w](int64_t i) { return bf16_to_fp32(w[i]); });
    }
    default: return 0.0f;  // callers dispatch quantized types elsewhere
  }
}

}  // namespace ds4::compute
