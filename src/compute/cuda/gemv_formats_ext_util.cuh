#pragma once
// Shared device pieces of the further ggml weight formats (gemv_formats_legacy.cuh,
// gemv_formats_k.cuh, gemv_formats_iq.cuh; internal to the CUDA backend): word and byte readers,
// byte-wise integer helpers, the 16-entry value tables and the IQ codebooks in device memory.
//
// Every format struct there has the shape the staged kernels take (gemv_formats.cuh): kBE, kBB,
// kActBE, kQ8K, kFloat, kPost, dot<R> (the CPU's integer block sums and the CPU's float
// operations on the block's scales, so the kernels of gemv_exact.cuh reproduce quant::vec_dot bit
// for bit) and dotf<R> (decoded weights times f32 activations), plus decode32(p, g, v): the 32
// weights of group g of the block at p, equal bit for bit to quant::dequantize_row (every
// multiply and add rounded on its own, in the CPU decoder's order: src/quant is built with
// -ffp-contract=off). decode32 reads single bytes only (safe on global memory at the end of an
// allocation); dot reads whole words of the staged block (shared memory with slack).
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "compute/cuda/gemv_formats.cuh"
#include "core/error.h"
#include "quant/iq_grids.h"

namespace ds4::cuda::gemv_detail {

// ---- readers --------------------------------------------------------------------------------

// The bytes from p on as 32-bit words (any alignment of p): w(i) holds bytes p+4i .. p+4i+3.
// Each word comes from two aligned loads and a funnel shift, so up to 3 bytes before p and 4
// bytes past the last word read are touched: only for staged blocks (the slice has the slack).
struct Words {
  const uint32_t* base;
  uint32_t sh;
  __device__ __forceinline__ explicit Words(const uint8_t* p) {
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3u);
    base = reinterpret_cast<const uint32_t*>(p - mis);
    sh = 8u * mis;
  }
  __device__ __forceinline__ uint32_t operator()(int i) const { return __funnelshift_r(base[i], base[i + 1], sh); }
  // The little-endian u16 at bytes p+2k, p+2k+1.
  __device__ __forceinline__ uint32_t h16(int k) const { return ((*this)(k >> 1) >> (16 * (k & 1))) & 0xffffu; }
};

__device__ __forceinline__ uint32_t rd16(const uint8_t* p, int off) {
  return static_cast<uint32_t>(p[off]) | (static_cast<uint32_t>(p[off + 1]) << 8);
}
__device__ __forceinline__ uint32_t rd32(const uint8_t* p, int off) {
  return rd16(p, off) | (rd16(p, off + 2) << 16);
}

// ---- byte-wise integer helpers ----------------------------------------------------------------

// Four bits (bit j) to four bytes of value 0/1 (byte j).
__device__ __forceinline__ uint32_t spread4(uint32_t bits) { return ((bits & 0xfu) * 0x00204081u) & 0x01010101u; }

// Per byte x_j - c_j as a two's-complement byte, for bytes x_j < 128 and c_j <= 128 (no borrow
// crosses a byte: each x_j is lifted by 128 first).
__device__ __forceinline__ int sub_bytes(uint32_t x, uint32_t c) {
  return static_cast<int>(((x | 0x80808080u) - c) ^ 0x80808080u);
}

// Sum of the four signed bytes of a.
__device__ __forceinline__ int sum4(int a) { return __dp4a(a, 0x01010101, 0); }

// The even-parity sign byte of a 7-bit code (quant::ksigns_iq2xs; the check program verifies
// the rule against the CPU's table).
__device__ __forceinline__ uint32_t iq_signs8(uint32_t s7) { return s7 | ((__popc(s7) & 1u) << 7); }

// Activation bytes [off, off+32) of a quantized row as 8 words (16-byte aligned: rows start at
// multiples of 32 bytes of a 256-byte aligned buffer).
__device__ __forceinline__ void act32(const int8_t* q, int (&av)[8]) {
  const int4 v0 = __ldg(reinterpret_cast<const int4*>(q)), v1 = __ldg(reinterpret_cast<const int4*>(q) + 1);
  av[0] = v0.x, av[1] = v0.y, av[2] = v0.z, av[3] = v0.w, av[4] = v1.x, av[5] = v1.y, av[6] = v1.z, av[7] = v1.w;
}

// ---- 16-entry value tables (IQ4_NL / IQ4_XS, MXFP4) --------------------------------------------

// The values as ggml defines them, four signed bytes per word (quant::kvalues_iq4nl /
// kvalues_mxfp4: ext_check_tables() compares them on the host before the first launch).
__host__ __device__ constexpr uint32_t pack4(int a, int b, int c, int d) {
  return static_cast<uint32_t>(a & 0xff) | (static_cast<uint32_t>(b & 0xff) << 8) |
         (static_cast<uint32_t>(c & 0xff) << 16) | (static_cast<uint32_t>(d & 0xff) << 24);
}
struct Iq4nlValues {
  static constexpr uint32_t w0 = pack4(-127, -104, -83, -65), w1 = pack4(-49, -35, -22, -10),
                            w2 = pack4(1, 13, 25, 38), w3 = pack4(53, 69, 89, 113);
};
struct Mxfp4Values {
  static constexpr uint32_t w0 = pack4(0, 1, 2, 3), w1 = pack4(4, 6, 8, 12), w2 = pack4(0, -1, -2, -3),
                            w3 = pack4(-4, -6, -8, -12);
};
template <class T>
__host__ __device__ constexpr int table_value(int i) {
  const uint32_t w = i < 4 ? T::w0 : i < 8 ? T::w1 : i < 12 ? T::w2 : T::w3;
  return static_cast<int8_t>(static_cast<uint8_t>((w >> (8 * (i & 3))) & 0xffu));
}

// Four table lookups at once: byte j of idx (0..15) -> the signed byte T[idx_j] in byte j.
template <class T>
__device__ __forceinline__ int lut16x4(uint32_t idx) {
  const uint32_t x = idx & 0x07070707u;
  const uint32_t y = x | (x >> 4);
  const uint32_t sel = (y & 0xffu) | ((y >> 8) & 0xff00u);  // selector nibble j = idx_j & 7
  const uint32_t lo = __byte_perm(T::w0, T::w1, sel), hi = __byte_perm(T::w2, T::w3, sel);
  const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xffu;  // entries 8..15 from the upper half
  return static_cast<int>((lo & ~m) | (hi & m));
}

// One lookup (decoders): T[i] for i in 0..15, as a float.
template <class T>
__device__ __forceinline__ float lut16f(uint32_t i) {
  const uint32_t w = (i & 8u) ? ((i & 4u) ? T::w3 : T::w2) : ((i & 4u) ? T::w1 : T::w0);
  return static_cast<float>(static_cast<int8_t>((w >> (8 * (i & 3u))) & 0xffu));
}

// ---- IQ codebooks in device memory ---------------------------------------------------------------
// As c_iq2xxs_grid (gemv_formats.cuh): static, so every translation unit that includes this has
// its own copy, filled from the CPU's tables (quant/iq_grids.h) by ext_upload_tables() of the
// same translation unit before its first launch. Global memory read through the L1 cache: the
// lookups are data-dependent, which constant memory would serialize.
static __device__ uint2 c_iq1s_grid[2048];
static __device__ uint2 c_iq2xs_grid[512];
static __device__ uint2 c_iq2s_grid[1024];
static __device__ uint32_t c_iq3xxs_grid[256];
static __device__ uint32_t c_iq3s_grid[512];

__device__ __forceinline__ uint2 grid_iq1s(uint32_t i) { return __ldg(&c_iq1s_grid[i]); }
__device__ __forceinline__ uint2 grid_iq2xs(uint32_t i) { return __ldg(&c_iq2xs_grid[i]); }
__device__ __forceinline__ uint2 grid_iq2s(uint32_t i) { return __ldg(&c_iq2s_grid[i]); }
__device__ __forceinline__ uint32_t grid_iq3xxs(uint32_t i) { return __ldg(&c_iq3xxs_grid[i]); }
__device__ __forceinline__ uint32_t grid_iq3s(uint32_t i) { return __ldg(&c_iq3s_grid[i]); }

// Host: the constexpr value tables above against the CPU's (once).
static inline void ext_check_tables() {
  static const bool ok = [] {
    for (int i = 0; i < 16; ++i)
      if (table_value<Iq4nlValues>(i) != quant::kvalues_iq4nl[i] || table_value<Mxfp4Values>(i) != quant::kvalues_mxfp4[i])
        return false;
    return true;
  }();
  if (!ok) fail("CUDA gemv: internal: the device IQ4_NL/MXFP4 value tables differ from quant/iq_grids.h");
}

// Host: uploads the codebooks of this translation unit once per device.
static inline void ext_upload_tables() {
  ext_check_tables();
  static std::mutex mu;
  static bool done[64] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) fail("CUDA gemv: cudaGetDevice: {}", cudaGetErrorString(e));
  if (dev < 0 || dev >= 64) fail("CUDA gemv: device index {} out of range", dev);
  std::lock_guard<std::mutex> lock(mu);
  if (done[dev]) return;
  auto up64 = [](const void* sym, const uint64_t* src, int n, const char* what) {
    static uint2 host[2048];
    for (int i = 0; i < n; ++i) host[i] = make_uint2(static_cast<uint32_t>(src[i]), static_cast<uint32_t>(src[i] >> 32));
    if (cudaError_t e = cudaMemcpyToSymbol(sym, host, sizeof(uint2) * static_cast<size_t>(n)); e != cudaSuccess)
      fail("CUDA gemv: uploading the {} grid: {}", what, cudaGetErrorString(e));
  };
  up64(c_iq1s_grid, quant::iq1s_grid, 2048, "IQ1_S/IQ1_M");
  up64(c_iq2xs_grid, quant::iq2xs_grid, 512, "IQ2_XS");
  up64(c_iq2s_grid, quant::iq2s_grid, 1024, "IQ2_S");
  if (cudaError_t e = cudaMemcpyToSymbol(c_iq3xxs_grid, quant::iq3xxs_grid, sizeof(uint32_t) * 256); e != cudaSuccess)
    fail("CUDA gemv: uploading the IQ3_XXS grid: {}", cudaGetErrorString(e));
  if (cudaError_t e = cudaMemcpyToSymbol(c_iq3s_grid, quant::iq3s_grid, sizeof(uint32_t) * 512); e != cudaSuccess)
    fail("CUDA gemv: uploading the IQ3_S grid: {}", cudaGetErrorString(e));
  done[dev] = true;
}

// ---- decoded weights against f32 activations (float_acts) -------------------------------------

// acc[r] += sum over the block of decode32's weights times activation row r, group by group.
template <class F, int R>
__device__ __forceinline__ void dotf_by_groups(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R]) {
#pragma unroll 1
  for (int g = 0; g < F::kBE / 32; ++g) {
    float v[32];
    F::decode32(p, g, v);
    const int64_t e0 = static_cast<int64_t>(F::kBE) * b + 32 * g;
#pragma unroll
    for (int t = 0; t < 32; ++t)
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < nr) acc[r] = fmaf(v[t], __ldg(a.x + r * a.stride + e0 + t), acc[r]);
  }
}

}  // namespace ds4::cuda::gemv_detail
