#pragma once
// The CPU's Q8_0 activation quantization (quant::quantize_row_q8_0, bit for bit) of one 32-value
// block by one warp, shared by the quantize kernel (gemv.cu) and the kernels that write a Q8_0
// copy of their one-row output beside it (DS4_CUDA_FUSE_QUANT: RMSNorm, the fused hc_pre norm,
// SwiGLU), so the one-row Q8_0 products that read that row need not quantize it again.
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

}  // namespace ds4::cuda
