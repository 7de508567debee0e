#pragma once
// cp.async (sm_80+): global -> shared copies that hold no register, so all of a thread's copies
// are in flight at once (a load/store loop waits for each load in turn). Shared by the kernels
// that stage operands two or more stages deep (gemm_mma.cu, gemm_moe_mma.cu, gemm_float.cu,
// attention_tiled.cu, cuda_ops_hc.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace ds4::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes, cached in L2 only (both addresses 16-byte aligned).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes, or (in false) 4 zero bytes with nothing read (src must still be a valid address).
__device__ __forceinline__ void cp_async4_zfill(uint32_t dst, const void* src, bool in) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 4 : 0) : "memory");
}
// 16 bytes into dst, of which the first n (0..16) are read from src and the rest are zeros (src
// 16-byte aligned and valid even when n is 0; cached in L2 only).
__device__ __forceinline__ void cp_async16_n(uint32_t dst, const void* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// 16 bytes (cached in L2 only), or (in false) 16 zero bytes with nothing read.
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Every copy of this thread, committed or not.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace ds4::cuda
