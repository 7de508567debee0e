#pragma once
// The 256-weight formats Q3_K, Q5_K, Q6_K and IQ4_XS against Q8_K activations (internal to the
// CUDA backend; shape of the structs: gemv_formats_ext_util.cuh). CPU reference:
// src/quant/k_quants_hi.cpp and iq_quants.cpp. The integer sums are exact, so the order in which
// a block's sub-block sums are formed is free; the block's float term repeats the CPU's
// expression operation for operation. Weights are prepared once per sub-block, then used against
// every activation row of the tile (isum[r]). The sub-block loops are unrolled only for one
// activation row: unrolled with R > 1 the staged kernels (80 registers a thread) spilled up to
// 5.6 KB a thread (ptxas -v, Q3_K at R = 16); rolled, none.
#include "compute/cuda/gemv_formats_ext_util.cuh"

namespace ds4::cuda::gemv_detail {

// acc[r] += (d * d_a(r, b)) * float(isum[r]): the term of Q3_K, Q6_K, IQ4_XS and the codebook
// formats.
template <int R>
__device__ __forceinline__ void q8k_terms(float d, const int (&isum)[R], int64_t b, const ActQ& a, int nr,
                                          float (&acc)[R]) {
  const int64_t nb = a.n / 256;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < nr) acc[r] += __fmul_rn(__fmul_rn(d, __ldg(a.d + r * nb + b)), static_cast<float>(isum[r]));
}

// {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 16 sub-blocks of 16,
// x = d * (sc_j - 32) * (q - (hbit ? 0 : 4)), q 2 bits.
struct FmtQ3_K {
  static constexpr int kBE = 256, kBB = 110, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  // quant::q3k_scales, scale j (0..15) from the 12 bytes at s.
  template <class Byte>
  __device__ static int scale(Byte sb, int j) {
    const int lo = j < 8 ? (sb(j) & 0xf) : (sb(j - 8) >> 4);
    return lo | (((sb(8 + j % 4) >> (2 * (j / 4))) & 3) << 4);
  }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p);  // hmask words 0..7, qs 8..23, scales 24..26, d in 27
    const uint32_t s0 = w(24), s1 = w(25), s2 = w(26);
    auto sb = [&](int k) { return static_cast<int>(byte_of(k < 4 ? s0 : k < 8 ? s1 : s2, k % 4)); };
    const float d = h2f(w(27) & 0xffffu);
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 2 : 1)
    for (int h = 0; h < 2; ++h)
#pragma unroll(R == 1 ? 4 : 1)
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int bit = 4 * h + s;
          int wv[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const uint32_t q = (w(8 + 8 * h + 4 * half + u) >> (2 * s)) & 0x03030303u;
            const uint32_t hb = (w(4 * half + u) >> bit) & 0x01010101u;
            wv[u] = sub_bytes(q | (hb << 2), 0x04040404u);  // q - (hbit ? 0 : 4)
          }
          const int sc = scale(sb, 8 * h + 2 * s + half) - 32;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if (r < nr) {
              const int4 v = __ldg(reinterpret_cast<const int4*>(a.qs + r * a.n + 256 * b + 128 * h + 32 * s + 16 * half));
              int sub = __dp4a(wv[0], v.x, 0);
              sub = __dp4a(wv[1], v.y, sub);
              sub = __dp4a(wv[2], v.z, sub);
              sub = __dp4a(wv[3], v.w, sub);
              isum[r] += sc * sub;
            }
          }
        }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 108));
    auto sb = [&](int k) { return static_cast<int>(p[96 + k]); };
    const int h = g / 4, s = g % 4, bit = 4 * h + s;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float dl = __fmul_rn(d, static_cast<float>(scale(sb, 8 * h + 2 * s + half) - 32));
#pragma unroll
      for (int t = 0; t < 16; ++t) {
        const int q = (p[32 + 32 * h + 16 * half + t] >> (2 * s)) & 3;
        const int hb = (p[16 * half + t] >> bit) & 1;
        v[16 * half + t] = __fmul_rn(dl, static_cast<float>(q - (hb ? 0 : 4)));
      }
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ3_K, R>(p, b, a, nr, acc);
  }
};

// quant::q4k_scale_min: scale and min of sub-block j from the 12 packed bytes (sb(k) = byte k).
template <class Byte>
__device__ __forceinline__ void k4_scale_min(Byte sb, int j, int& sc, int& m) {
  if (j < 4) {
    sc = sb(j) & 63;
    m = sb(j + 4) & 63;
  } else {
    sc = (sb(j + 4) & 15) | ((sb(j - 4) >> 6) << 4);
    m = (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
  }
}

// {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: 8 sub-blocks of 32,
// x = d * sc_j * q - dmin * m_j, q = Q4_K nibble | bit j of qh << 4.
struct FmtQ5_K {
  static constexpr int kBE = 256, kBB = 176, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p);  // d|dmin 0, scales 1..3, qh 4..11, qs 12..43
    const uint32_t s0 = w(1), s1 = w(2), s2 = w(3);
    auto sb = [&](int k) { return static_cast<int>(byte_of(k < 4 ? s0 : k < 8 ? s1 : s2, k % 4)); };
    const uint32_t dd = w(0);
    const float d = h2f(dd & 0xffffu), dmin = h2f(dd >> 16);
    const int64_t nb = a.n / 256;
    int isum[R], summs[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0, summs[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(sb, j, sc, m);
      int wv[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        wv[u] = static_cast<int>(((w(12 + 8 * (j / 2) + u) >> (4 * (j % 2))) & 0x0f0f0f0fu) |
                                 (((w(4 + u) >> j) & 0x01010101u) << 4));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          const uint32_t bs2 = __ldg(reinterpret_cast<const uint32_t*>(a.bs + (r * nb + b) * 16) + j);
          summs[r] += m * (static_cast<int>(static_cast<int16_t>(bs2 & 0xffffu)) + (static_cast<int>(bs2) >> 16));
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * j, av);
          int sub = 0;
#pragma unroll
          for (int u = 0; u < 8; ++u) sub = __dp4a(wv[u], av[u], sub);
          isum[r] += sc * sub;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        const float ad = __ldg(a.d + r * nb + b);
        const float dall = __fmul_rn(ad, d), dm = __fmul_rn(ad, dmin);
        acc[r] += __fsub_rn(__fmul_rn(dall, static_cast<float>(isum[r])), __fmul_rn(dm, static_cast<float>(summs[r])));
      }
    }
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0)), dmin = h2f(rd16(p, 2));
    auto sb = [&](int k) { return static_cast<int>(p[4 + k]); };
    int sc, m;
    k4_scale_min(sb, g, sc, m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const uint8_t* ql = p + 48 + 32 * (g / 2);
#pragma unroll
    for (int t = 0; t < 32; ++t) {
      const int q = ((g % 2) ? (ql[t] >> 4) : (ql[t] & 0xf)) + (((p[16 + t] >> g) & 1) ? 16 : 0);
      v[t] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ5_K, R>(p, b, a, nr, acc);
  }
};

// {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 16 sub-blocks of 16, x = d * sc_j * (q - 32),
// q 6 bits (4 in ql, 2 in qh).
struct FmtQ6_K {
  static constexpr int kBE = 256, kBB = 210, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p);  // ql 0..31, qh 32..47, scales 48..51, d in 52
    const float d = h2f(w(52) & 0xffffu);
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 2 : 1)
    for (int half = 0; half < 2; ++half)
#pragma unroll(R == 1 ? 4 : 1)
      for (int k = 0; k < 4; ++k) {
        // Weights 128*half + 32*k + l (l < 32): groups g0 = 8*half + 2*k (l < 16) and g0 + 1.
        int wv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const uint32_t lo = (w(16 * half + 8 * (k & 1) + u) >> (4 * (k >> 1))) & 0x0f0f0f0fu;
          const uint32_t hi = ((w(32 + 8 * half + u) >> (2 * k)) & 0x03030303u) << 4;
          wv[u] = sub_bytes(lo | hi, 0x20202020u);
        }
        const int g0 = 8 * half + 2 * k;
        const int sc0 = static_cast<int8_t>(byte_of(w(48 + g0 / 4), g0 % 4));
        const int sc1 = static_cast<int8_t>(byte_of(w(48 + (g0 + 1) / 4), (g0 + 1) % 4));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < nr) {
            int av[8];
            act32(a.qs + r * a.n + 256 * b + 128 * half + 32 * k, av);
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int u = 0; u < 4; ++u) s0 = __dp4a(wv[u], av[u], s0), s1 = __dp4a(wv[4 + u], av[4 + u], s1);
            isum[r] += sc0 * s0 + sc1 * s1;
          }
        }
      }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 208));
    const int half = g / 4, k = g % 4;
    const float d0 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(p[192 + 2 * g]))),
                d1 = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(p[192 + 2 * g + 1])));
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const uint32_t ql = p[64 * half + 32 * (k & 1) + l];
      const int lo = static_cast<int>(k < 2 ? (ql & 0xfu) : (ql >> 4));
      const int code = lo | (((p[128 + 32 * half + l] >> (2 * k)) & 3) << 4);
      v[l] = __fmul_rn(l < 16 ? d0 : d1, static_cast<float>(code - 32));
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtQ6_K, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8 sub-blocks of 32,
// x = d * (ls_j - 32) * kvalues_iq4nl[nibble] (nibbles as IQ4_NL per sub-block).
struct FmtIQ4_XS {
  static constexpr int kBE = 256, kBB = 136, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  __device__ static int scale(uint32_t sh, uint32_t sl_byte, int ib) {
    return static_cast<int>(((sl_byte >> (4 * (ib % 2))) & 0xfu) | (((sh >> (2 * ib)) & 3u) << 4)) - 32;
  }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p);  // d|scales_h 0, scales_l 1, qs 2..33
    const uint32_t w0 = w(0), sl = w(1);
    const float d = h2f(w0 & 0xffffu);
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = scale(w0 >> 16, byte_of(sl, ib / 2), ib);
      int lo[4], hi[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint32_t q = w(2 + 4 * ib + u);
        lo[u] = lut16x4<Iq4nlValues>(q & 0x0f0f0f0fu);
        hi[u] = lut16x4<Iq4nlValues>((q >> 4) & 0x0f0f0f0fu);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int sub = 0;
#pragma unroll
          for (int u = 0; u < 4; ++u) sub = __dp4a(lo[u], av[u], sub);
#pragma unroll
          for (int u = 0; u < 4; ++u) sub = __dp4a(hi[u], av[4 + u], sub);
          isum[r] += ls * sub;
        }
      }
    }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const float dl = __fmul_rn(d, static_cast<float>(scale(rd16(p, 2), p[4 + g / 2], g)));
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = p[8 + 16 * g + j];
      v[j] = __fmul_rn(dl, lut16f<Iq4nlValues>(q & 0xfu));
      v[j + 16] = __fmul_rn(dl, lut16f<Iq4nlValues>(q >> 4));
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ4_XS, R>(p, b, a, nr, acc);
  }
};

}  // namespace ds4::cuda::gemv_detail
