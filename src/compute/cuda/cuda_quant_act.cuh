#pragma once
// The CPU's Q8_0 activation quantization (quant::quantize_row_q8_0, bit for bit) of one 32-value
// block by one warp, shared by the quantize kernel (gemv.cu) and the kernels that write a Q8_0
// copy of their one-row output beside it (DS4_CUDA_FUSE_QUANT: RMSNorm, the fused hc_pre norm,
// SwiGLU), so the one-row Q8_0 products that read that row need not quantize it again; and the
// CPU's Q8_K quantization of one 256-value block (k_quant_q8_K and the fused router, router.cu).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "compute/cuda/cuda_ops.h"  // Q8Out

namespace ds4::cuda {

// quant.cpp's rounded_to_i8: the low byte of the truncated value, 0 for +-inf/NaN (x86).
__device__ __forceinline__ int8_t rounded_to_i8(float v) {
  const int32_t i = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<int8_t>(i);
}

// Every lane of a warp calls it, lane j with value j of the block; qs: the block's 32 bytes,
// d: its scale (the f16-rounded value as a float, as quantize_acts stores it).
__device__ __forceinline__ void q8_0_block_warp(float v, int lane, int8_t* qs, float* d) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float dv = __fdiv_rn(amax, 127.0f);
  const float id = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
  qs[lane] = rounded_to_i8(roundf(__fmul_rn(v, id)));
  if (lane == 0) *d = __half2float(__float2half_rn(dv));
}

// quant::quantize_row_q8_K of one 256-value block by one warp (lane l: values 8l .. 8l+7): x the
// block's values, q its 256 quants, d its scale, bsum its 16 group sums. Every lane calls it.
__device__ inline void q8_K_block_warp(const float* x, int lane, int8_t* qs, float* d, int16_t* bsum) {
  const float* xr = x + 8 * lane;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = xr[j];
  // The first value of largest magnitude (the CPU scans with a strict >, from amax = 0).
  float amax = 0.0f, vmax = 0.0f;
  int idx = INT_MAX;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float a = fabsf(v[j]);
    if (a > amax) amax = a, vmax = v[j], idx = 8 * lane + j;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, off);
    const float ov = __shfl_xor_sync(0xffffffffu, vmax, off);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
    if (oa > amax || (oa == amax && oi < idx)) amax = oa, vmax = ov, idx = oi;
  }
  int8_t* q = qs + 8 * lane;
  if (amax == 0.0f) {
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = 0;
    if ((lane & 1) == 0) bsum[lane / 2] = 0;
    if (lane == 0) *d = 0.0f;
    return;
  }
  const float iscale = __fdiv_rn(-127.0f, vmax);
  int sum = 0;
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    // k_quant_search.h nearest_int: add 1.5*2^23, keep the low mantissa bits.
    const float t = __fadd_rn(__fmul_rn(iscale, v[j]), 12582912.0f);
    int vi = static_cast<int>(__float_as_uint(t) & 0x007fffffu) - 0x00400000;
    vi = vi < 127 ? vi : 127;
    const int8_t qi = static_cast<int8_t>(vi);
    sum += qi;
    packed[j / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(qi)) << (8 * (j % 4));
  }
  *reinterpret_cast<uint2*>(q) = make_uint2(packed[0], packed[1]);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if ((lane & 1) == 0) bsum[lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) *d = __fdiv_rn(1.0f, iscale);
}

}  // namespace ds4::cuda
