#pragma once
// Host stand-ins for the few CUDA names that src/compute/cuda/gemv_formats*.cuh use, so that
// test_cuda_formats_host.cpp can compile the device format code with the host compiler and
// compare its arithmetic with the CPU codecs on machines without a GPU. Only this test's
// include path has this folder. The intrinsics follow the CUDA documentation (__dp4a: signed
// byte dot plus c; __funnelshift_r: the low word of (hi:lo) >> (s & 31); __byte_perm: byte n
// = byte ((s >> 4n) & 7) of (y:x); __f*_rn: one IEEE operation, round to nearest even, which
// the host gives with -ffp-contract=off). The GPU check programs (tests/cuda) stay the
// authority on the device's behaviour.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __constant__
#define __shared__
struct int4 { int x, y, z, w; };
struct int2 { int x, y; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
typedef int cudaError_t;
enum { cudaSuccess = 0 };
typedef void* cudaStream_t;
inline const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return 0; }
inline cudaError_t cudaMemcpyToSymbol(const void* sym, const void* src, size_t n) { std::memcpy(const_cast<void*>(sym), src, n); return 0; }
template <class T> cudaError_t cudaGetSymbolAddress(void** p, const T& sym) { *p = (void*)&sym; return 0; }
struct Dim3E { unsigned x = 0, y = 0, z = 0; };
inline Dim3E threadIdx, blockIdx, blockDim{1, 1, 1};
inline void __syncthreads() {}
inline void __syncwarp() {}
template <class T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <class T> T __shfl_sync(unsigned, T v, int) { return v; }
template <class T> T __ldg(const T* p) { return *p; }
inline int __dp4a(int a, int b, int c) {
  for (int j = 0; j < 4; ++j) c += static_cast<int8_t>(a >> (8 * j)) * static_cast<int8_t>(b >> (8 * j));
  return c;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<unsigned>(v >> (sh & 31));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
