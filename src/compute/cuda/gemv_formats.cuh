#pragma once
// Device-side pieces of the GEMV kernels (internal to gemv*.cu): activation views, the per-format
// block dot products and decoders, the warp-group row loop and its reduction.
//
// Work split. A "group" of LPR lanes (a power of two, <= 32) owns one weight row at a time. For a
// quantized format the group copies LPR consecutive blocks of its row with coalesced 16-byte loads
// into its slice of shared memory (keeping the global address modulo 16, so every block keeps its
// natural alignment), then each lane computes one whole block against every activation row of the
// tile, exactly as quant::vec_dot does for that block (same integer sums, same float operations on
// the block's scales); the lanes' partial sums meet in a shuffle reduction. Only the order in which
// the per-block floats are added differs from the CPU. Float formats (F32/F16/BF16) skip the
// staging: each lane reads 16-byte chunks of the row straight from global memory.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "core/error.h"
#include "quant/iq2_tables.h"

namespace ds4::cuda::gemv_detail {

constexpr int kWarps = 8;  // warps per block (256 threads)
constexpr int kThreads = kWarps * 32;
constexpr int kSliceSlack = 48;  // bytes past a staged segment: alignment edges and over-reads

__device__ __forceinline__ float h2f(uint32_t h) { return __half2float(__ushort_as_half(static_cast<uint16_t>(h))); }
__device__ __forceinline__ float bf2f(uint32_t h) { return __uint_as_float((h & 0xffffu) << 16); }

// Quantized activation rows (Q8_0 or Q8_K with the CPU's values, in a split layout): row r has
// n int8 quants at qs + r*n, n/block scales (as f32: Q8_0's f16 scale widened exactly) at
// d + r*(n/block) and, for Q8_K, n/16 block sums at bs + r*(n/16).
struct ActQ {
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const int16_t* bs = nullptr;
  int64_t n = 0;
};

// f32 activation rows: row r at x + r*stride.
struct ActF {
  const float* x = nullptr;
  int64_t stride = 0;
};

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// Byte j of word w (j compile-time after unrolling).
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int j) { return (w >> (8 * j)) & 0xffu; }

// Four sign bits (bit j for byte j) to a mask of 0xff bytes.
__device__ __forceinline__ int sign_mask4(uint32_t bits4) {
  return static_cast<int>((((bits4 & 0xfu) * 0x00204081u) & 0x01010101u) * 0xffu);
}

// Reads `count` words of the bytes starting at p (any alignment that is a multiple of 2): word t
// holds bytes p+4t .. p+4t+3. Reads up to 4 bytes past the last word (inside the slice slack).
template <int kCount>
__device__ __forceinline__ void load_words_a2(const uint8_t* p, uint32_t (&out)[kCount]) {
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(p) & 3u);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p - mis);
  uint32_t prev = w[0];
#pragma unroll
  for (int t = 0; t < kCount; ++t) {
    const uint32_t next = w[t + 1];
    out[t] = __funnelshift_r(prev, next, 8 * mis);
    prev = next;
  }
}

__device__ __forceinline__ int4 ld4(const int8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }

// ---------------------------------------------------------------------------------------------
// Per-format blocks. dot<R>: acc[r] += this block's float term of quant::vec_dot against
// activation row r (r < nr), computed with the CPU's operations. dotf<R>: acc[r] += decoded
// weights (bit-exact with quant::dequantize_row) times f32 activations, fused multiply-add.

struct FmtQ8_0 {
  static constexpr int kBE = 32, kBB = 34, kActBE = 32;
  static constexpr bool kQ8K = false, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const float wd = h2f(*reinterpret_cast<const uint16_t*>(p));
    uint32_t q[8];
    load_words_a2<8>(p + 2, q);
    const int64_t nb = a.n / 32;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        const int8_t* aq = a.qs + r * a.n + 32 * b;
        const int4 v0 = ld4(aq), v1 = ld4(aq + 16);
        int s = dp4a(q[0], v0.x, 0);
        s = dp4a(q[1], v0.y, s);
        s = dp4a(q[2], v0.z, s);
        s = dp4a(q[3], v0.w, s);
        s = dp4a(q[4], v1.x, s);
        s = dp4a(q[5], v1.y, s);
        s = dp4a(q[6], v1.z, s);
        s = dp4a(q[7], v1.w, s);
        const float dd = __fmul_rn(wd, __ldg(a.d + r * nb + b));
        acc[r] += __fmul_rn(static_cast<float>(s), dd);
      }
    }
  }

  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    const float wd = h2f(*reinterpret_cast<const uint16_t*>(p));
    uint32_t q[8];
    load_words_a2<8>(p + 2, q);
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float w = __fmul_rn(static_cast<float>(static_cast<int8_t>(byte_of(q[t], j))), wd);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < nr) acc[r] = fmaf(w, __ldg(a.x + r * a.stride + 32 * b + 4 * t + j), acc[r]);
      }
  }
};

struct FmtQ2_K {
  static constexpr int kBE = 256, kBB = 84, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: 21 words, 4-byte aligned.
  __device__ static void load(const uint8_t* p, uint32_t (&w)[21]) {
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
    for (int i = 0; i < 21; ++i) w[i] = pw[i];
  }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    uint32_t w[21];
    load(p, w);
    const float d = h2f(w[20] & 0xffffu), dmin = h2f(w[20] >> 16);
    const int64_t nb = a.n / 256;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        const int8_t* aq = a.qs + r * a.n + 256 * b;
        const int16_t* bs = a.bs + (r * nb + b) * 16;
        const int4 s0 = __ldg(reinterpret_cast<const int4*>(bs)), s1 = __ldg(reinterpret_cast<const int4*>(bs) + 1);
        const int sw[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
        int summs = 0;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const int bsum = (j & 1) ? (sw[j / 2] >> 16) : static_cast<int>(static_cast<int16_t>(sw[j / 2] & 0xffff));
          summs += bsum * static_cast<int>(byte_of(w[j / 4], j % 4) >> 4);
        }
        int isum = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            const int4 v0 = ld4(aq + 128 * h + 32 * s), v1 = ld4(aq + 128 * h + 32 * s + 16);
            const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              int sub = 0;
#pragma unroll
              for (int u = 0; u < 4; ++u)
                sub = dp4a(static_cast<int>((w[4 + 8 * h + 4 * half + u] >> (2 * s)) & 0x03030303u), av[4 * half + u], sub);
              const int j = 8 * h + 2 * s + half;
              isum += static_cast<int>(byte_of(w[j / 4], j % 4) & 0xfu) * sub;
            }
          }
        const float ad = __ldg(a.d + r * nb + b);
        const float dall = __fmul_rn(ad, d), dm = __fmul_rn(ad, dmin);
        acc[r] += __fsub_rn(__fmul_rn(dall, static_cast<float>(isum)), __fmul_rn(dm, static_cast<float>(summs)));
      }
    }
  }

  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    uint32_t w[21];
    load(p, w);
    const float d = h2f(w[20] & 0xffffu), dmin = h2f(w[20] >> 16);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int j = 8 * h + 2 * s + half;
          const uint32_t sc = byte_of(w[j / 4], j % 4);
          const float dl = __fmul_rn(d, static_cast<float>(sc & 0xfu)), ml = __fmul_rn(dmin, static_cast<float>(sc >> 4));
#pragma unroll
          for (int t = 0; t < 16; ++t) {
            const uint32_t q = (byte_of(w[4 + 8 * h + 4 * half + t / 4], t % 4) >> (2 * s)) & 3u;
            const float v = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
            const int64_t e = 256 * b + 128 * h + 32 * s + 16 * half + t;
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r < nr) acc[r] = fmaf(v, __ldg(a.x + r * a.stride + e), acc[r]);
          }
        }
  }
};

struct FmtQ4_K {
  static constexpr int kBE = 256, kBB = 144, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 36 words, 4-byte aligned.
  __device__ static void load(const uint8_t* p, uint32_t (&w)[36]) {
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
    for (int i = 0; i < 36; ++i) w[i] = pw[i];
  }
  // quant::q4k_scale_min on the 12 scale bytes held in w[1..3].
  __device__ static void scale_min(const uint32_t (&w)[36], int j, int& sc, int& m) {
    auto sb = [&](int k) { return static_cast<int>(byte_of(w[1 + k / 4], k % 4)); };
    if (j < 4) {
      sc = sb(j) & 63;
      m = sb(j + 4) & 63;
    } else {
      sc = (sb(j + 4) & 15) | ((sb(j - 4) >> 6) << 4);
      m = (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
    }
  }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    uint32_t w[36];
    load(p, w);
    const float d = h2f(w[0] & 0xffffu), dmin = h2f(w[0] >> 16);
    int sc[8], mn[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) scale_min(w, j, sc[j], mn[j]);
    const int64_t nb = a.n / 256;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        const int8_t* aq = a.qs + r * a.n + 256 * b;
        const int16_t* bs = a.bs + (r * nb + b) * 16;
        const int4 s0 = __ldg(reinterpret_cast<const int4*>(bs)), s1 = __ldg(reinterpret_cast<const int4*>(bs) + 1);
        const int sw[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
        int summs = 0, isum = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int lo = static_cast<int>(static_cast<int16_t>(sw[j] & 0xffff)), hi = sw[j] >> 16;
          summs += mn[j] * (lo + hi);
          const int4 v0 = ld4(aq + 32 * j), v1 = ld4(aq + 32 * j + 16);
          const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
          int sub = 0;
#pragma unroll
          for (int u = 0; u < 8; ++u)
            sub = dp4a(static_cast<int>((w[4 + 8 * (j / 2) + u] >> (4 * (j % 2))) & 0x0f0f0f0fu), av[u], sub);
          isum += sc[j] * sub;
        }
        const float ad = __ldg(a.d + r * nb + b);
        const float dall = __fmul_rn(ad, d), dm = __fmul_rn(ad, dmin);
        acc[r] += __fsub_rn(__fmul_rn(dall, static_cast<float>(isum)), __fmul_rn(dm, static_cast<float>(summs)));
      }
    }
  }

  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    uint32_t w[36];
    load(p, w);
    const float d = h2f(w[0] & 0xffffu), dmin = h2f(w[0] >> 16);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min(w, j, sc, m);
      const float dl = __fmul_rn(d, static_cast<float>(sc)), ml = __fmul_rn(dmin, static_cast<float>(m));
#pragma unroll
      for (int t = 0; t < 32; ++t) {
        const uint32_t q = (byte_of(w[4 + 8 * (j / 2) + t / 4], t % 4) >> (4 * (j % 2))) & 0xfu;
        const float v = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
        const int64_t e = 256 * b + 32 * j + t;
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < nr) acc[r] = fmaf(v, __ldg(a.x + r * a.stride + e), acc[r]);
      }
    }
  }
};

struct FmtIQ2_XXS {
  static constexpr int kBE = 256, kBB = 66, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  // quant::vec_dot_iq2_xxs_q8_K_scalar returns 0.125 * (sum of the block terms).
  static constexpr float kPost = 0.125f;

  // ksigns_iq2xs[i]: the 7 stored sign bits plus an eighth that makes the parity even.
  __device__ static uint32_t signs8(uint32_t s7) { return s7 | ((__popc(s7) & 1u) << 7); }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2* grid) {
    const float d = h2f(*reinterpret_cast<const uint16_t*>(p));
    uint32_t q[16];
    load_words_a2<16>(p + 2, q);
    const int64_t nb = a.n / 256;
    int bsum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) bsum[r] = 0;
#pragma unroll
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux0 = q[2 * ib], aux1 = q[2 * ib + 1];
      const int ls = 2 * static_cast<int>(aux1 >> 28) + 1;
      int g[8], m[8];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint2 gv = grid[byte_of(aux0, l)];
        const uint32_t sg = signs8((aux1 >> (7 * l)) & 127u);
        g[2 * l] = static_cast<int>(gv.x), g[2 * l + 1] = static_cast<int>(gv.y);
        m[2 * l] = sign_mask4(sg) & g[2 * l], m[2 * l + 1] = sign_mask4(sg >> 4) & g[2 * l + 1];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          const int8_t* aq = a.qs + r * a.n + 256 * b + 32 * ib;
          const int4 v0 = ld4(aq), v1 = ld4(aq + 16);
          const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
          int pos = 0, neg = 0;
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            pos = dp4a(g[t], av[t], pos);
            neg = dp4a(m[t], av[t], neg);
          }
          bsum[r] += (pos - 2 * neg) * ls;  // sum of +-grid*q8 for this 32-weight group
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < nr) acc[r] += __fmul_rn(__fmul_rn(d, __ldg(a.d + r * nb + b)), static_cast<float>(bsum[r]));
  }

  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2* grid) {
    const float d = h2f(*reinterpret_cast<const uint16_t*>(p));
    uint32_t q[16];
    load_words_a2<16>(p + 2, q);
#pragma unroll
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux0 = q[2 * ib], aux1 = q[2 * ib + 1];
      // (d * (0.5 + s)) * 0.25, in ggml's order.
      const float db = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(aux1 >> 28))), 0.25f);
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint2 gv = grid[byte_of(aux0, l)];
        const uint32_t sg = signs8((aux1 >> (7 * l)) & 127u);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t mag = byte_of(j < 4 ? gv.x : gv.y, j % 4);
          const float v0 = __fmul_rn(db, static_cast<float>(mag));
          const float v = __uint_as_float(__float_as_uint(v0) ^ (((sg >> j) & 1u) << 31));
          const int64_t e = 256 * b + 32 * ib + 8 * l + j;
#pragma unroll
          for (int r = 0; r < R; ++r)
            if (r < nr) acc[r] = fmaf(v, __ldg(a.x + r * a.stride + e), acc[r]);
        }
      }
    }
  }
};

// Float weights: 16-byte chunks of kEPC elements.
template <int kBytes>
struct FmtFloat {
  static constexpr bool kFloat = true, kQ8K = false;
  static constexpr int kES = kBytes;        // bytes per element
  static constexpr int kEPC = 16 / kBytes;  // elements per 16-byte chunk
  static constexpr int kBE = 1, kBB = kBytes, kActBE = 1;
  static constexpr float kPost = 1.0f;
};
struct FmtF32 : FmtFloat<4> {
  __device__ static float selem(const uint8_t* row, int e) { return reinterpret_cast<const float*>(row)[e]; }
  __device__ static float elem(const uint8_t* row, int64_t e) { return __ldg(reinterpret_cast<const float*>(row) + e); }
  __device__ static void chunk(const uint4& v, float (&f)[4]) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y), f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
  }
};
struct FmtF16 : FmtFloat<2> {
  __device__ static float selem(const uint8_t* row, int e) { return h2f(reinterpret_cast<const uint16_t*>(row)[e]); }
  __device__ static float elem(const uint8_t* row, int64_t e) { return h2f(__ldg(reinterpret_cast<const uint16_t*>(row) + e)); }
  __device__ static void chunk(const uint4& v, float (&f)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) f[2 * i] = h2f(u[i] & 0xffffu), f[2 * i + 1] = h2f(u[i] >> 16);
  }
};
struct FmtBF16 : FmtFloat<2> {
  __device__ static float selem(const uint8_t* row, int e) { return bf2f(reinterpret_cast<const uint16_t*>(row)[e]); }
  __device__ static float elem(const uint8_t* row, int64_t e) { return bf2f(__ldg(reinterpret_cast<const uint16_t*>(row) + e)); }
  __device__ static void chunk(const uint4& v, float (&f)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) f[2 * i] = bf2f(u[i]), f[2 * i + 1] = bf2f(u[i] >> 16);
  }
};

// ---------------------------------------------------------------------------------------------
// Group geometry of one launch: lanes per row (LPR = 1 << log2) and bytes of shared memory per
// group for staged formats.
struct Geom {
  int lpr_log2 = 5;
  int slice_bytes = 0;
};

// Copies bytes [src, src+nbytes) into slice so that slice + (src mod 16) holds src; 16-byte loads
// for the chunks fully inside the range, byte loads at the two edges (never outside the range).
// Returns the shared address of src.
__device__ __forceinline__ const uint8_t* stage(const uint8_t* src, int nbytes, uint8_t* slice, int gl, int nl) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src), e = s + static_cast<uintptr_t>(nbytes);
  const uintptr_t a0 = s & ~static_cast<uintptr_t>(15);
  const int nch = static_cast<int>((e - a0 + 15) >> 4);
  for (int c = gl; c < nch; c += nl) {
    const uintptr_t a = a0 + 16u * static_cast<uintptr_t>(c);
    uint8_t* dst = slice + 16 * c;
    if (a >= s && a + 16 <= e) {
      *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(a));
    } else {
      for (int i = 0; i < 16; ++i)
        if (a + i >= s && a + i < e) dst[i] = __ldg(reinterpret_cast<const unsigned char*>(a + i));
    }
  }
  return slice + (s - a0);
}

// acc[r] (r < R) of every lane of the group becomes the group's total.
template <int R>
__device__ __forceinline__ void group_reduce(float (&acc)[R], int lpr) {
  for (int off = lpr >> 1; off > 0; off >>= 1)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
}

// acc[r] += row . activation row r for r < nr, summed over the group's lanes only after
// group_reduce. Every lane of the warp must call this with the same n_in (the loop contains
// __syncwarp); `active` false skips the loads and the arithmetic (rows past the matrix).
// FA: quantized weights against f32 activations (decoded weights).
template <class F, bool FA, int R>
__device__ __forceinline__ void row_dot(const uint8_t* row, int64_t n_in, const ActQ& aq, const ActF& af, int nr,
                                        float (&acc)[R], uint8_t* slice, int gl, int lpr, bool active, bool vec,
                                        const uint2* grid) {
  if constexpr (F::kFloat) {
    (void)aq, (void)slice, (void)grid;
    if (!active) return;
    if (vec) {
      const int64_t nch = n_in / F::kEPC;
      for (int64_t c = gl; c < nch; c += lpr) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(row) + c);
        float f[F::kEPC];
        F::chunk(v, f);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < nr) {
            const float* x = af.x + r * af.stride + c * F::kEPC;
#pragma unroll
            for (int i = 0; i < F::kEPC; ++i) acc[r] = fmaf(f[i], __ldg(x + i), acc[r]);
          }
      }
    } else {
      for (int64_t e = gl; e < n_in; e += lpr) {
        const float f = F::elem(row, e);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r < nr) acc[r] = fmaf(f, __ldg(af.x + r * af.stride + e), acc[r]);
      }
    }
  } else {
    (void)vec;
    const int64_t nb = n_in / F::kBE;
    for (int64_t b0 = 0; b0 < nb; b0 += lpr) {
      const int nblk = static_cast<int>(nb - b0 < lpr ? nb - b0 : lpr);
      const uint8_t* sp = nullptr;
      if (active) sp = stage(row + b0 * F::kBB, nblk * F::kBB, slice, gl, lpr);
      __syncwarp();
      if (active && gl < nblk) {
        if constexpr (FA) F::template dotf<R>(sp + gl * F::kBB, b0 + gl, af, nr, acc, grid);
        else F::template dot<R>(sp + gl * F::kBB, b0 + gl, aq, nr, acc, grid);
      }
      __syncwarp();
    }
  }
}

// The IQ2_XXS grid (256 points of 8 magnitude bytes) in constant memory. Without relocatable
// device code every .cu has its own copy: static here, filled by upload_iq2_grid() of the same
// translation unit from quant::iq2xxs_grid (the CPU's table, so both use one set of values).
// Global rather than constant memory: every block copies all 256 entries to shared memory, and
// constant memory serializes a warp's 32 different addresses.
// Entries 256..383 (kIq2SignMasks) are the sign masks of the 128 7-bit sign codes: code s with
// its parity bit (FmtIQ2_XXS::signs8) as 8 bytes, 0xff where the weight is negative, so a
// warp kernel replaces the parity and the two sign_mask4 by one load (L1-resident, as the grid).
// Entries 384.. hold two 32-bit tables for the byte-permute decode (WarpIQ2_XXSNib): from word
// 2*kIq2GridNib, 256 grid points as 8 nibbles (nibble k = magnitude index of byte k: 0x08 -> 0,
// 0x19 -> 1, 0x2b -> 2), then from word 2*kIq2SignNib the 128 sign codes as bit 2 of each
// nibble, so (grid | sign) selects byte k's signed value from kIq2Values by one PRMT per 4.
constexpr int kIq2SignMasks = 256;
constexpr int kIq2GridNib = 384;   // 128 uint2 = 256 words
constexpr int kIq2SignNib = 512;   // 64 uint2 = 128 words
constexpr int kIq2TableEntries = 576;
constexpr uint32_t kIq2ValuesLo = 0x002b1908u;  // bytes 0..3: 8, 25, 43, 0
constexpr uint32_t kIq2ValuesHi = 0x00d5e7f8u;  // bytes 4..7: -8, -25, -43, 0
static __device__ uint2 c_iq2xxs_grid[kIq2TableEntries];

// Once per device per translation unit (the copy is per context).
static inline void upload_iq2_grid() {
  static std::mutex mu;
  static bool done[64] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) fail("CUDA gemv: cudaGetDevice: {}", cudaGetErrorString(e));
  if (dev < 0 || dev >= 64) fail("CUDA gemv: device index {} out of range", dev);
  std::lock_guard<std::mutex> lock(mu);
  if (done[dev]) return;
  uint2 host[kIq2TableEntries] = {};
  uint32_t* words = reinterpret_cast<uint32_t*>(host);
  for (int i = 0; i < 256; ++i) {
    host[i] = make_uint2(static_cast<uint32_t>(quant::iq2xxs_grid[i]), static_cast<uint32_t>(quant::iq2xxs_grid[i] >> 32));
    uint32_t nib = 0;
    for (int k = 0; k < 8; ++k) {
      const uint32_t b = static_cast<uint32_t>(quant::iq2xxs_grid[i] >> (8 * k)) & 0xffu;
      const uint32_t code = b == 0x08u ? 0u : b == 0x19u ? 1u : b == 0x2bu ? 2u : 3u;
      if (code == 3u) fail("CUDA gemv: IQ2_XXS grid point {} byte {} is {}, not 8/25/43", i, k, b);
      nib |= code << (4 * k);
    }
    words[2 * kIq2GridNib + i] = nib;
  }
  for (uint32_t c = 0; c < 128; ++c) {
    const uint32_t s8 = c | ((static_cast<uint32_t>(__builtin_popcount(c)) & 1u) << 7);
    uint32_t m[2] = {0, 0};
    for (int j = 0; j < 8; ++j)
      if ((s8 >> j) & 1u) m[j / 4] |= 0xffu << (8 * (j % 4));
    host[kIq2SignMasks + c] = make_uint2(m[0], m[1]);
    uint32_t sn = 0;
    for (int j = 0; j < 8; ++j)
      if ((s8 >> j) & 1u) sn |= 4u << (4 * j);
    words[2 * kIq2SignNib + c] = sn;
  }
  if (cudaError_t e = cudaMemcpyToSymbol(c_iq2xxs_grid, host, sizeof host); e != cudaSuccess)
    fail("CUDA gemv: uploading the IQ2_XXS grid: {}", cudaGetErrorString(e));
  done[dev] = true;
}

// The table's device address in this translation unit (uploaded first), per device.
static inline const uint2* iq2_grid_address() {
  upload_iq2_grid();
  static const uint2* grids[64] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) fail("CUDA gemv: cudaGetDevice: {}", cudaGetErrorString(e));
  if (!grids[dev]) {
    void* a = nullptr;
    if (cudaError_t e = cudaGetSymbolAddress(&a, c_iq2xxs_grid); e != cudaSuccess)
      fail("CUDA gemv: address of the IQ2_XXS grid: {}", cudaGetErrorString(e));
    grids[dev] = static_cast<const uint2*>(a);
  }
  return grids[dev];
}

template <class F>
__device__ __forceinline__ const uint2* setup_grid(uint8_t* smem) {
  if constexpr (std::is_same_v<F, FmtIQ2_XXS>) {
    uint2* g = reinterpret_cast<uint2*>(smem);
    for (int i = threadIdx.x; i < 256; i += blockDim.x) g[i] = __ldg(&c_iq2xxs_grid[i]);
    __syncthreads();
    return g;
  } else {
    (void)smem;
    return nullptr;
  }
}
template <class F>
constexpr int grid_smem_bytes() {
  return std::is_same_v<F, FmtIQ2_XXS> ? 256 * 8 : 0;
}

}  // namespace ds4::cuda::gemv_detail
