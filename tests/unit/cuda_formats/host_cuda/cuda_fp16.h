#pragma once
// Host stand-in for cuda_fp16.h (see cuda_runtime.h here): the two conversions the format
// headers use, through the CPU's exact f16 decoder.
#include <cstdint>

#include "core/fp16.h"

struct __half {
  uint16_t v;
};
inline __half __ushort_as_half(uint16_t v) { return {v}; }
inline float __half2float(__half h) { return ds4::fp16_to_fp32(h.v); }
inline __half __float2half_rn(float f) { return {ds4::fp32_to_fp16(f)}; }  // ggml's: round to nearest even
