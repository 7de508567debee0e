#pragma once
// RMS helpers shared by the RMSNorm kernel (cuda_ops_misc.cu) and the hyper-connection kernels
// (cuda_ops_hc.cu): the sum of squares in double (exact products), its inverse root, and the
// scaled store. Products and sums use explicit round-to-nearest intrinsics, so no FMA
// contraction can change them whatever the including file's --fmad setting.
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/cuda_quant_act.cuh"
#include "compute/cuda/cuda_util.cuh"

namespace ds4::cuda {

// The sum of squares over x[first], x[first+step], x[first+2*step], ... in that order, with
// eight loads issued before their adds (a plain loop waits for each load in turn).
__device__ inline double sumsq_strided(const float* x, int64_t n, int64_t first, int64_t step) {
  double ss = 0;
  for (int64_t i0 = first; i0 < n; i0 += 8 * step) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i0 + u * step < n ? x[i0 + u * step] : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * step < n) ss = __dadd_rn(ss, __dmul_rn(static_cast<double>(v[u]), static_cast<double>(v[u])));
  }
  return ss;
}

// Thread t's share of the block: x[t], x[t+B], ... (B = blockDim.x).
__device__ inline double thread_sumsq(const float* x, int64_t n) {
  return sumsq_strided(x, n, threadIdx.x, blockDim.x);
}

// 1 / sqrt(mean(x^2) + eps) from the sum of squares of n values.
__device__ inline float inv_rms_of(double ss, int64_t n, float eps) {
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + static_cast<double>(eps)));
}

// 1 / sqrt(mean(x^2) + eps) of one row, the mean in double; the whole block calls it and gets it.
// The partition (thread t sums x[t + k*blockDim.x]) depends on the block size.
__device__ inline float block_inv_rms(const float* x, int64_t n, float eps) {
  __shared__ double sh[32];
  return inv_rms_of(block_sum(thread_sumsq(x, n), sh), n, eps);
}

// y = x * inv (* w) over the elements sumsq_strided(first, step) visits, so y may alias x.
// With q.qs, also y's Q8_0 copy: then n, first - lane and step are multiples of 32, so each
// step's 32 lanes of a warp hold one whole block.
__device__ inline void rms_store_strided(const float* x, const float* w, int64_t n, float inv, float* y, int64_t first,
                                         int64_t step, Q8Out q = {}) {
  for (int64_t i = first; i < n; i += step) {
    const float v = w ? __fmul_rn(__fmul_rn(x[i], inv), w[i]) : __fmul_rn(x[i], inv);
    y[i] = v;
    if (q.qs) q8_0_block_warp(v, static_cast<int>(i & 31), q.qs + (i & ~int64_t{31}), q.d + i / 32);
  }
}

__device__ inline void rms_store(const float* x, const float* w, int64_t n, float inv, float* y, Q8Out q = {}) {
  rms_store_strided(x, w, n, inv, y, threadIdx.x, blockDim.x, q);
}

}  // namespace ds4::cuda
