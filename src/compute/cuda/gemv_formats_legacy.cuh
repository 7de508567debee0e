#pragma once
// The 32-weight block formats Q4_0, Q5_0, IQ4_NL and MXFP4 against Q8_0 activations, and Q5_1
// against Q8_1 (internal to the CUDA backend; shape of the structs: gemv_formats_ext_util.cuh).
// CPU reference: src/quant/legacy_quants.cpp. Each block's term is float(sumi) * (d_w * d_a)
// with the exact integer sum sumi (Q5_1: (d_w * d_a) * float(sumi) + m_w * s_a), as the CPU
// computes it; the kernels add the terms in the CPU's order.
#include "compute/cuda/gemv_formats_ext_util.cuh"
#ifdef __CUDACC__  // the launch below
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_util.cuh"
#endif

namespace ds4::cuda::gemv_detail {

// Shared by the four: acc[r] += float(sumi_r) * (wd * d_a(r, b)) with sumi_r = lo . a[0..16) +
// hi . a[16..32), lo/hi the 16 signed weight bytes of the block's first and second half.
template <int R>
__device__ __forceinline__ void q8_0_block_terms(const int (&lo)[4], const int (&hi)[4], float wd, int64_t b,
                                                 const ActQ& a, int nr, float (&acc)[R]) {
  const int64_t nb = a.n / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < nr) {
      int av[8];
      act32(a.qs + r * a.n + 32 * b, av);
      int s = 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) s = __dp4a(lo[u], av[u], s);
#pragma unroll
      for (int u = 0; u < 4; ++u) s = __dp4a(hi[u], av[4 + u], s);
      acc[r] += __fmul_rn(static_cast<float>(s), __fmul_rn(wd, __ldg(a.d + r * nb + b)));
    }
  }
}

// {f16 d; u8 qs[16]}: x_j = d * ((qs[j] & 15) - 8), x_{16+j} = d * ((qs[j] >> 4) - 8).
struct FmtQ4_0 {
  static constexpr int kBE = 32, kBB = 18, kActBE = 32;
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);
    int lo[4], hi[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t q = w(u);
      lo[u] = sub_bytes(q & 0x0f0f0f0fu, 0x08080808u);
      hi[u] = sub_bytes((q >> 4) & 0x0f0f0f0fu, 0x08080808u);
    }
    q8_0_block_terms<R>(lo, hi, h2f(rd16(p, 0)), b, a, nr, acc);
  }
  __device__ static void decode32(const uint8_t* p, int, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = p[2 + j];
      v[j] = __fmul_rn(static_cast<float>(static_cast<int>(q & 0xfu) - 8), d);
      v[j + 16] = __fmul_rn(static_cast<float>(static_cast<int>(q >> 4) - 8), d);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ4_0, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u8 qh[4]; u8 qs[16]}: code j = nibble as Q4_0 | bit j of qh << 4, x = d * (code - 16).
struct FmtQ5_0 {
  static constexpr int kBE = 32, kBB = 22, kActBE = 32;
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);
    const uint32_t qh = w(0);
    int lo[4], hi[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t q = w(1 + u);
      lo[u] = sub_bytes((q & 0x0f0f0f0fu) | (spread4(qh >> (4 * u)) << 4), 0x10101010u);
      hi[u] = sub_bytes(((q >> 4) & 0x0f0f0f0fu) | (spread4(qh >> (16 + 4 * u)) << 4), 0x10101010u);
    }
    q8_0_block_terms<R>(lo, hi, h2f(rd16(p, 0)), b, a, nr, acc);
  }
  __device__ static void decode32(const uint8_t* p, int, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t qh = rd32(p, 2);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const uint32_t q = j < 16 ? (p[6 + j] & 0xfu) : (p[6 + j - 16] >> 4);
      const int code = static_cast<int>(q | (((qh >> j) & 1u) << 4));
      v[j] = __fmul_rn(static_cast<float>(code - 16), d);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ5_0, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u8 qs[16]}: x = d * kvalues_iq4nl[nibble], nibbles as Q4_0.
struct FmtIQ4_NL {
  static constexpr int kBE = 32, kBB = 18, kActBE = 32;
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);
    int lo[4], hi[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t q = w(u);
      lo[u] = lut16x4<Iq4nlValues>(q & 0x0f0f0f0fu);
      hi[u] = lut16x4<Iq4nlValues>((q >> 4) & 0x0f0f0f0fu);
    }
    q8_0_block_terms<R>(lo, hi, h2f(rd16(p, 0)), b, a, nr, acc);
  }
  __device__ static void decode32(const uint8_t* p, int, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = p[2 + j];
      v[j] = __fmul_rn(d, lut16f<Iq4nlValues>(q & 0xfu));
      v[j + 16] = __fmul_rn(d, lut16f<Iq4nlValues>(q >> 4));
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ4_NL, R>(p, b, a, nr, acc);
  }
};

// quant::e8m0_half: the E8M0 exponent byte as 2^(e-128) (e = 0, 1 subnormal).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  return __uint_as_float(e < 2 ? (0x00200000u << e) : ((e - 1u) << 23));
}

// {u8 e; u8 qs[16]} (17 bytes: any alignment): x = kvalues_mxfp4[nibble] * 2^(e-128).
struct FmtMXFP4 {
  static constexpr int kBE = 32, kBB = 17, kActBE = 32;
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 1);
    int lo[4], hi[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t q = w(u);
      lo[u] = lut16x4<Mxfp4Values>(q & 0x0f0f0f0fu);
      hi[u] = lut16x4<Mxfp4Values>((q >> 4) & 0x0f0f0f0fu);
    }
    q8_0_block_terms<R>(lo, hi, e8m0_half(p[0]), b, a, nr, acc);
  }
  __device__ static void decode32(const uint8_t* p, int, float (&v)[32]) {
    const float d = e8m0_half(p[0]);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = p[1 + j];
      v[j] = __fmul_rn(lut16f<Mxfp4Values>(q & 0xfu), d);
      v[j + 16] = __fmul_rn(lut16f<Mxfp4Values>(q >> 4), d);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtMXFP4, R>(p, b, a, nr, acc);
  }
};

// ---- Q5_1 and its Q8_1 activations -----------------------------------------------------------

// Q8_1 activations in the kernels' split view: int8 quants as Q8_0's, and per 32 values two
// floats in ActQ::d, the block's f16 scale d and its f16 s = d * sum(q) widened exactly (so the
// view has one float per 16 values: Q5_1's kActBE is 16, which keeps the kernels' offsets
// `aq.d += elements / kActBE` right).
// quant::quantize_row_q8_1 for one block of 32 values: amax, d = amax / 127, q = roundf(x / d),
// s = f16(sum(q) * d) with the unrounded d, then d rounded to f16.
__device__ __forceinline__ void quant_q8_1_block(const float* x, int8_t* qs, float* ds) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int8_t q = static_cast<int8_t>(static_cast<int>(roundf(__fmul_rn(x[j], id))));
    qs[j] = q;
    sum += q;
  }
  ds[0] = __half2float(__float2half_rn(d));
  ds[1] = __half2float(__float2half_rn(__fmul_rn(static_cast<float>(sum), d)));
}

#ifdef __CUDACC__  // (the host-compiled format test, tests/unit/cuda_formats, has no launches)
// One thread per 32-value block (activation rows are short; this runs once per matmul).
static __global__ void k_quant_q8_1_ext(const float* x, int64_t rows, int64_t n, int64_t x_stride, int8_t* qs,
                                        float* ds) {
  pdl_begin();
  const int64_t nb = n / 32;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= rows * nb) return;
  const int64_t r = blk / nb, b = blk % nb;
  quant_q8_1_block(x + r * x_stride + 32 * b, qs + r * n + 32 * b, ds + 2 * blk);
}

// Host: quantizes rows of x into qs (rows * n bytes) and ds (rows * n / 16 floats) on `stream`.
static inline void quantize_acts_q8_1(const float* x, int64_t rows, int64_t n, int64_t x_stride, int8_t* qs, float* ds,
                                      cudaStream_t stream) {
  const int64_t blocks = rows * (n / 32);
  if (blocks <= 0) return;
  launch(k_quant_q8_1_ext, static_cast<unsigned>((blocks + 127) / 128), 128, 0, stream, x, rows, n, x_stride, qs, ds);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    fail("CUDA kernel gemv quantize_q8_1 (activations) failed to launch: {}", cudaGetErrorString(e));
}
#endif

// {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: code as Q5_0, x = d * code + m.
struct FmtQ5_1 {
  static constexpr int kBE = 32, kBB = 24, kActBE = 16;  // ActQ::d: {d, s} per 32 values
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 4);
    const uint32_t qh = w(0);
    int lo[4], hi[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t q = w(1 + u);
      lo[u] = static_cast<int>((q & 0x0f0f0f0fu) | (spread4(qh >> (4 * u)) << 4));
      hi[u] = static_cast<int>(((q >> 4) & 0x0f0f0f0fu) | (spread4(qh >> (16 + 4 * u)) << 4));
    }
    const float wd = h2f(rd16(p, 0)), wm = h2f(rd16(p, 2));
    const int64_t ns = a.n / 16;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        int av[8];
        act32(a.qs + r * a.n + 32 * b, av);
        int s = 0;
#pragma unroll
        for (int u = 0; u < 4; ++u) s = __dp4a(lo[u], av[u], s);
#pragma unroll
        for (int u = 0; u < 4; ++u) s = __dp4a(hi[u], av[4 + u], s);
        const float ad = __ldg(a.d + r * ns + 2 * b), as = __ldg(a.d + r * ns + 2 * b + 1);
        acc[r] += __fadd_rn(__fmul_rn(__fmul_rn(wd, ad), static_cast<float>(s)), __fmul_rn(wm, as));
      }
    }
  }
  __device__ static void decode32(const uint8_t* p, int, float (&v)[32]) {
    const float d = h2f(rd16(p, 0)), m = h2f(rd16(p, 2));
    const uint32_t qh = rd32(p, 4);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const uint32_t q = j < 16 ? (p[8 + j] & 0xfu) : (p[8 + j - 16] >> 4);
      const int code = static_cast<int>(q | (((qh >> j) & 1u) << 4));
      v[j] = __fadd_rn(__fmul_rn(static_cast<float>(code), d), m);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ5_1, R>(p, b, a, nr, acc);
  }
};

}  // namespace ds4::cuda::gemv_detail
