#pragma once
// The CPU's fixed summation trees, shared by the CUDA kernels that reproduce its float results
// bit for bit (gemv_exact.cuh, cuda_ops_attention.cu). Explicit intrinsics: some including
// files are compiled with FMA contraction on.
#include <cuda_runtime.h>

namespace ds4::cuda {

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), as quant::fold_lanes8 (and an AVX2 horizontal sum).
__device__ __forceinline__ float fold8(const float* l) {
  const float a0 = __fadd_rn(l[0], l[4]), a1 = __fadd_rn(l[1], l[5]), a2 = __fadd_rn(l[2], l[6]),
              a3 = __fadd_rn(l[3], l[7]);
  return __fadd_rn(__fadd_rn(a0, a2), __fadd_rn(a1, a3));
}

// Lane L of the warp holds FMA chain L of the CPU's AVX2 float dot (dot_avx2_float.cpp): lane l
// of (c_l + c_{l+8}) + (c_{l+16} + c_{l+24}), then fold8 over the 8 lanes. Every lane of the
// warp must call it; every lane gets the result.
__device__ __forceinline__ float warp_fold_chains(float a) {
  const int l = threadIdx.x & 7;
  const float c0 = __shfl_sync(0xffffffffu, a, l), c1 = __shfl_sync(0xffffffffu, a, l + 8);
  const float c2 = __shfl_sync(0xffffffffu, a, l + 16), c3 = __shfl_sync(0xffffffffu, a, l + 24);
  const float v = __fadd_rn(__fadd_rn(c0, c1), __fadd_rn(c2, c3));
  float lv[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) lv[k] = __shfl_sync(0xffffffffu, v, k);
  return fold8(lv);
}

}  // namespace ds4::cuda
