#pragma once
// Device helpers shared by the CUDA op kernels. cuda_ops_misc.cu is compiled with
// --fmad=false so that a*b+c is two rounded operations, as in the CPU backend (built without
// FMA contraction): element-wise results then match the CPU bit for bit where the operations
// and their order are the same (see src/compute/cuda/CMakeLists.txt for the other file).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds4::cuda {

constexpr unsigned kFull = 0xffffffffu;

// Programmatic dependent launch (cuda_launch.h). pdl_trigger lets the next kernel on the stream
// launch now; pdl_wait waits until the kernels before this one have finished and their writes
// are visible. Both are no-ops in a kernel launched without the PDL attribute. Every kernel
// launched through cuda::launch calls pdl_begin (both) first, before it touches memory, or
// pdl_trigger first and pdl_wait before it touches memory that any kernel writes: in between
// it may only read the weights (immutable once uploaded), e.g. stage its weight rows while its
// predecessor ends.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_begin() {
  pdl_trigger();
  pdl_wait();
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum of one double per thread over the block (blockDim.x a multiple of 32, <= 1024); every
// thread gets the result. `sh` holds 32 doubles.
__device__ inline double block_sum(double v, double* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double t = lane < nw ? sh[lane] : 0.0;
  return warp_sum(t);
}

// std::min / std::max / std::clamp as the CPU reference spells them (NaN handling included:
// std::min(a, b) is (b < a) ? b : a).
__device__ inline float std_min(float a, float b) { return (b < a) ? b : a; }
__device__ inline float std_max(float a, float b) { return (a < b) ? b : a; }
__device__ inline float std_clamp(float v, float lo, float hi) { return (v < lo) ? lo : (hi < v) ? hi : v; }

// exp/log1p of a float the way glibc's expf/log1pf round them: computed in double and rounded
// once. glibc's float functions are within 0.502 ulp of the exact value, so the two agree
// except when the exact value lies within ~0.002 ulp of a rounding midpoint (measured by the
// check program, not assumed).
__device__ inline float expf_ref(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ inline float log1pf_ref(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

__device__ inline float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline float bf2f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
__device__ inline uint16_t ld16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Element i of a float-typed row (F32, F16, BF16; type ids as ggml's).
__device__ inline float float_row_elem(int type, const uint8_t* row, int64_t i) {
  if (type == 0) return reinterpret_cast<const float*>(row)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[i];
  return type == 1 ? h2f(h) : bf2f(h);
}

}  // namespace ds4::cuda
