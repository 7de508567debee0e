#pragma once
// The codebook formats IQ1_S, IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S against Q8_K activations
// (internal to the CUDA backend; shape of the structs: gemv_formats_ext_util.cuh). CPU reference:
// src/quant/iq_quants.cpp. Grid points come from the codebooks in device memory (uploaded from
// quant/iq_grids.h); signs are applied as in FmtIQ2_XXS: sum(+-g*a) = g.a - 2 * (g & signmask).a.
// The block term and kPost (0.125 / 0.25 after the fold) repeat the CPU's float operations.
#include "compute/cuda/gemv_formats_ext_util.cuh"
#include "compute/cuda/gemv_formats_k.cuh"  // q8k_terms

namespace ds4::cuda::gemv_detail {

// sum_j (+-g_j) * a_j over 8 weights: grid words g0, g1 (4 magnitude bytes each, < 128), sign
// bits sg (bit j for weight j), activation words a0, a1.
__device__ __forceinline__ int signed_dot8(uint32_t g0, uint32_t g1, uint32_t sg, int a0, int a1) {
  const int pos = __dp4a(static_cast<int>(g0), a0, __dp4a(static_cast<int>(g1), a1, 0));
  const int neg = __dp4a(sign_mask4(sg) & static_cast<int>(g0), a0, __dp4a(sign_mask4(sg >> 4) & static_cast<int>(g1), a1, 0));
  return pos - 2 * neg;
}

// (w * g) * (+-1): a decoded codebook weight, ggml's operation order.
__device__ __forceinline__ float signed_weight(float db, uint32_t mag, uint32_t sg, int j) {
  return __fmul_rn(__fmul_rn(db, static_cast<float>(mag)), ((sg >> j) & 1u) ? -1.0f : 1.0f);
}

// {f16 d; u16 qs[32]; u8 scales[8]}: qs = 9-bit grid index | 7-bit sign code << 9; two 4-bit
// scales per 32 weights (2s+1, times 0.125 after the sum).
struct FmtIQ2_XS {
  static constexpr int kBE = 256, kBB = 74, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 0.125f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);  // qs 0..15, scales 16..17
    const float d = h2f(rd16(p, 0));
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t sc = byte_of(w(16 + ib / 4), ib % 4);
      const int ls0 = 2 * static_cast<int>(sc & 0xfu) + 1, ls1 = 2 * static_cast<int>(sc >> 4) + 1;
      uint2 g[4];
      uint32_t sg[4];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t q = w.h16(4 * ib + l);
        g[l] = grid_iq2xs(q & 511u);
        sg[l] = iq_signs8(q >> 9);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int s0 = 0, s1 = 0;
#pragma unroll
          for (int l = 0; l < 2; ++l) s0 += signed_dot8(g[l].x, g[l].y, sg[l], av[2 * l], av[2 * l + 1]);
#pragma unroll
          for (int l = 2; l < 4; ++l) s1 += signed_dot8(g[l].x, g[l].y, sg[l], av[2 * l], av[2 * l + 1]);
          isum[r] += ls0 * s0 + ls1 * s1;
        }
      }
    }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t sc = p[66 + g];
    const float db0 = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(sc & 0xfu))), 0.25f);
    const float db1 = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(sc >> 4))), 0.25f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t q = rd16(p, 2 + 2 * (4 * g + l));
      const uint2 gv = grid_iq2xs(q & 511u);
      const uint32_t sg = iq_signs8(q >> 9);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * l + j] = signed_weight(l < 2 ? db0 : db1, byte_of(j < 4 ? gv.x : gv.y, j % 4), sg, j);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ2_XS, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]}: qs[0..32) low bytes of 10-bit grid indices,
// qs[32..64) explicit sign bytes, qh 2 index bits per grid point; scales as IQ2_XS.
struct FmtIQ2_S {
  static constexpr int kBE = 256, kBB = 82, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 0.125f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);  // index bytes 0..7, signs 8..15, qh 16..17, scales 18..19
    const float d = h2f(rd16(p, 0));
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t sc = byte_of(w(18 + ib / 4), ib % 4);
      const int ls0 = 2 * static_cast<int>(sc & 0xfu) + 1, ls1 = 2 * static_cast<int>(sc >> 4) + 1;
      const uint32_t qs = w(ib), signs = w(8 + ib), qh = byte_of(w(16 + ib / 4), ib % 4);
      uint2 g[4];
#pragma unroll
      for (int l = 0; l < 4; ++l) g[l] = grid_iq2s(byte_of(qs, l) | ((qh << (8 - 2 * l)) & 0x300u));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int s0 = 0, s1 = 0;
#pragma unroll
          for (int l = 0; l < 2; ++l) s0 += signed_dot8(g[l].x, g[l].y, byte_of(signs, l), av[2 * l], av[2 * l + 1]);
#pragma unroll
          for (int l = 2; l < 4; ++l) s1 += signed_dot8(g[l].x, g[l].y, byte_of(signs, l), av[2 * l], av[2 * l + 1]);
          isum[r] += ls0 * s0 + ls1 * s1;
        }
      }
    }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t sc = p[74 + g], qh = p[66 + g];
    const float db0 = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(sc & 0xfu))), 0.25f);
    const float db1 = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(sc >> 4))), 0.25f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 gv = grid_iq2s(p[2 + 4 * g + l] | ((qh << (8 - 2 * l)) & 0x300u));
      const uint32_t sg = p[2 + 32 + 4 * g + l];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * l + j] = signed_weight(l < 2 ? db0 : db1, byte_of(j < 4 ? gv.x : gv.y, j % 4), sg, j);
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ2_S, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u8 qs[96]}: qs[0..64) grid indices (4 weights each), qs[64..96) per 32 weights a u32 of
// four 7-bit sign codes and a 4-bit scale (2s+1, times 0.25 after the sum).
struct FmtIQ3_XXS {
  static constexpr int kBE = 256, kBB = 98, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 0.25f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);  // indices 0..15, aux 16..23
    const float d = h2f(rd16(p, 0));
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = w(16 + ib), i0 = w(2 * ib), i1 = w(2 * ib + 1);
      const int ls = 2 * static_cast<int>(aux >> 28) + 1;
      uint32_t g[8], sg[4];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t iw = l < 2 ? i0 : i1;
        g[2 * l] = grid_iq3xxs(byte_of(iw, 2 * (l % 2)));
        g[2 * l + 1] = grid_iq3xxs(byte_of(iw, 2 * (l % 2) + 1));
        sg[l] = iq_signs8((aux >> (7 * l)) & 127u);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int sub = 0;
#pragma unroll
          for (int l = 0; l < 4; ++l) sub += signed_dot8(g[2 * l], g[2 * l + 1], sg[l], av[2 * l], av[2 * l + 1]);
          isum[r] += ls * sub;
        }
      }
    }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t aux = rd32(p, 2 + 64 + 4 * g);
    const float db = __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, static_cast<float>(aux >> 28))), 0.5f);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t sg = iq_signs8((aux >> (7 * l)) & 127u);
      const uint32_t g1 = grid_iq3xxs(p[2 + 8 * g + 2 * l]), g2 = grid_iq3xxs(p[2 + 8 * g + 2 * l + 1]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[8 * l + j] = signed_weight(db, byte_of(g1, j), sg, j);
        v[8 * l + 4 + j] = signed_weight(db, byte_of(g2, j), sg, 4 + j);
      }
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ3_XXS, R>(p, b, a, nr, acc);
  }
};

// {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}: 9-bit grid indices (qs | qh bit),
// explicit sign bits, one 4-bit scale (2s+1) per 32 weights.
struct FmtIQ3_S {
  static constexpr int kBE = 256, kBB = 110, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);  // qs 0..15, qh 16..17, signs 18..25, scales 26
    const float d = h2f(rd16(p, 0));
    const uint32_t scw = w(26);
    int isum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) isum[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t s4 = byte_of(scw, ib / 2);
      const int ls = 1 + 2 * static_cast<int>(ib % 2 ? s4 >> 4 : s4 & 0xfu);
      const uint32_t qh = byte_of(w(16 + ib / 4), ib % 4), signs = w(18 + ib), q0 = w(2 * ib), q1 = w(2 * ib + 1);
      uint32_t g[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) g[k] = grid_iq3s(byte_of(k < 4 ? q0 : q1, k % 4) | (((qh >> k) & 1u) << 8));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int sub = 0;
#pragma unroll
          for (int l = 0; l < 4; ++l) sub += signed_dot8(g[2 * l], g[2 * l + 1], byte_of(signs, l), av[2 * l], av[2 * l + 1]);
          isum[r] += ls * sub;
        }
      }
    }
    q8k_terms<R>(d, isum, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t s4 = p[2 + 104 + g / 2], qh = p[2 + 64 + g];
    const float db = __fmul_rn(d, static_cast<float>(1 + 2 * static_cast<int>(g % 2 ? s4 >> 4 : s4 & 0xfu)));
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t sg = p[2 + 72 + 4 * g + l];
      const uint32_t g1 = grid_iq3s(p[2 + 8 * g + 2 * l] | (((qh >> (2 * l)) & 1u) << 8));
      const uint32_t g2 = grid_iq3s(p[2 + 8 * g + 2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[8 * l + j] = signed_weight(db, byte_of(g1, j), sg, j);
        v[8 * l + 4 + j] = signed_weight(db, byte_of(g2, j), sg, 4 + j);
      }
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ3_S, R>(p, b, a, nr, acc);
  }
};

// The IQ1 block term: (d * d_a) * (float(sumi) + 0.125 * float(sumi1)), sumi1 the delta sums.
template <int R>
__device__ __forceinline__ void iq1_terms(float d, const int (&sumi)[R], const int (&sumi1)[R], int64_t b,
                                          const ActQ& a, int nr, float (&acc)[R]) {
  const int64_t nb = a.n / 256;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < nr)
      acc[r] += __fmul_rn(__fmul_rn(d, __ldg(a.d + r * nb + b)),
                          __fadd_rn(static_cast<float>(sumi[r]), __fmul_rn(0.125f, static_cast<float>(sumi1[r]))));
}

// Grid byte j of an IQ1 point as a float (signed bytes -1, 0, 1).
__device__ __forceinline__ float iq1_grid_value(uint2 gv, int j) {
  return static_cast<float>(static_cast<int8_t>(byte_of(j < 4 ? gv.x : gv.y, j % 4)));
}

// {f16 d; u8 qs[32]; u16 qh[8]}: 11-bit grid indices (qs | 3 bits of qh), per 32 weights a 3-bit
// scale (2s+1) and the sign of the 0.125 delta (qh bit 15).
struct FmtIQ1_S {
  static constexpr int kBE = 256, kBB = 50, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p + 2);  // qs 0..7, qh 8..11
    const float d = h2f(rd16(p, 0));
    int sumi[R], sumi1[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sumi[r] = 0, sumi1[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t qh = w.h16(16 + ib), qs = w(ib);
      const int ls = 2 * static_cast<int>((qh >> 12) & 7u) + 1;
      const int lsd = (qh & 0x8000u) ? -ls : ls;
      uint2 g[4];
#pragma unroll
      for (int l = 0; l < 4; ++l) g[l] = grid_iq1s(byte_of(qs, l) | (((qh >> (3 * l)) & 7u) << 8));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
          int sg = 0, sq = 0;
#pragma unroll
          for (int l = 0; l < 4; ++l) {
            sg = __dp4a(static_cast<int>(g[l].x), av[2 * l], __dp4a(static_cast<int>(g[l].y), av[2 * l + 1], sg));
            sq += sum4(av[2 * l]) + sum4(av[2 * l + 1]);
          }
          sumi[r] += ls * sg;
          sumi1[r] += lsd * sq;
        }
      }
    }
    iq1_terms<R>(d, sumi, sumi1, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const float d = h2f(rd16(p, 0));
    const uint32_t qh = rd16(p, 34 + 2 * g);
    const float dl = __fmul_rn(d, static_cast<float>(2 * static_cast<int>((qh >> 12) & 7u) + 1));
    const float delta = (qh & 0x8000u) ? -0.125f : 0.125f;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 gv = grid_iq1s(p[2 + 4 * g + l] | (((qh >> (3 * l)) & 7u) << 8));
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * l + j] = __fmul_rn(dl, __fadd_rn(iq1_grid_value(gv, j), delta));
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ1_S, R>(p, b, a, nr, acc);
  }
};

// {u8 qs[32]; u8 qh[16]; u8 scales[8]}: 11-bit grid indices (qs | 3 bits of qh), per 8 weights
// a delta sign (qh bits 3 / 7), per 16 weights a 3-bit scale (2s+1); the f16 super-block scale
// is spread over the top nibbles of the four scale words (quant::iq1m_scale_bits).
struct FmtIQ1_M {
  static constexpr int kBE = 256, kBB = 56, kActBE = 256;
  static constexpr bool kQ8K = true, kFloat = false;
  static constexpr float kPost = 1.0f;

  __device__ static uint32_t scale_bits(uint32_t sc0, uint32_t sc1, uint32_t sc2, uint32_t sc3) {
    return (sc0 >> 12) | ((sc1 >> 8) & 0x00f0u) | ((sc2 >> 4) & 0x0f00u) | (sc3 & 0xf000u);
  }

  template <int R>
  __device__ static void dot(const uint8_t* p, int64_t b, const ActQ& a, int nr, float (&acc)[R], const uint2*) {
    const Words w(p);  // qs 0..7, qh 8..11, scales 12..13
    const uint32_t sw0 = w(12), sw1 = w(13);
    const float d = h2f(scale_bits(sw0 & 0xffffu, sw0 >> 16, sw1 & 0xffffu, sw1 >> 16));
    int sumi1[R], sumi2[R];
#pragma unroll
    for (int r = 0; r < R; ++r) sumi1[r] = 0, sumi2[r] = 0;
#pragma unroll(R == 1 ? 8 : 1)
    for (int ib = 0; ib < 8; ++ib) {
      const int shift = 6 * (ib % 2);
      const uint32_t sc = ((ib < 4 ? sw0 : sw1) >> (16 * ((ib / 2) & 1))) & 0xffffu;  // scale word ib / 2
      const int ls1 = 2 * static_cast<int>((sc >> shift) & 7u) + 1;
      const int ls2 = 2 * static_cast<int>((sc >> (shift + 3)) & 7u) + 1;
      const uint32_t qs = w(ib), qhw = w(8 + ib / 2);
      const uint32_t qh0 = byte_of(qhw, 2 * (ib % 2)), qh1 = byte_of(qhw, 2 * (ib % 2) + 1);
      const uint32_t idx[4] = {byte_of(qs, 0) | ((qh0 << 8) & 0x700u), byte_of(qs, 1) | ((qh0 << 4) & 0x700u),
                               byte_of(qs, 2) | ((qh1 << 8) & 0x700u), byte_of(qs, 3) | ((qh1 << 4) & 0x700u)};
      const int ld[4] = {(qh0 & 0x08u) ? -ls1 : ls1, (qh0 & 0x80u) ? -ls1 : ls1, (qh1 & 0x08u) ? -ls2 : ls2,
                         (qh1 & 0x80u) ? -ls2 : ls2};
      uint2 g[4];
#pragma unroll
      for (int l = 0; l < 4; ++l) g[l] = grid_iq1s(idx[l]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < nr) {
          int av[8];
          act32(a.qs + r * a.n + 256 * b + 32 * ib, av);
#pragma unroll
          for (int l = 0; l < 4; ++l) {
            const int gs = __dp4a(static_cast<int>(g[l].x), av[2 * l], __dp4a(static_cast<int>(g[l].y), av[2 * l + 1], 0));
            sumi1[r] += (l < 2 ? ls1 : ls2) * gs;
            sumi2[r] += ld[l] * (sum4(av[2 * l]) + sum4(av[2 * l + 1]));
          }
        }
      }
    }
    iq1_terms<R>(d, sumi1, sumi2, b, a, nr, acc);
  }

  __device__ static void decode32(const uint8_t* p, int g, float (&v)[32]) {
    const uint32_t sc0 = rd16(p, 48), sc1 = rd16(p, 50), sc2 = rd16(p, 52), sc3 = rd16(p, 54);
    const float d = h2f(scale_bits(sc0, sc1, sc2, sc3));
    const uint32_t scg = rd16(p, 48 + 2 * (g / 2));
    const int shift = 6 * (g % 2);
    const float dl1 = __fmul_rn(d, static_cast<float>(2 * static_cast<int>((scg >> shift) & 7u) + 1));
    const float dl2 = __fmul_rn(d, static_cast<float>(2 * static_cast<int>((scg >> (shift + 3)) & 7u) + 1));
    const uint32_t qh0 = p[32 + 2 * g], qh1 = p[32 + 2 * g + 1];
    const uint32_t idx[4] = {p[4 * g] | ((qh0 << 8) & 0x700u), p[4 * g + 1] | ((qh0 << 4) & 0x700u),
                             p[4 * g + 2] | ((qh1 << 8) & 0x700u), p[4 * g + 3] | ((qh1 << 4) & 0x700u)};
    const bool neg[4] = {(qh0 & 0x08u) != 0, (qh0 & 0x80u) != 0, (qh1 & 0x08u) != 0, (qh1 & 0x80u) != 0};
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 gv = grid_iq1s(idx[l]);
      const float delta = neg[l] ? -0.125f : 0.125f;
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * l + j] = __fmul_rn(l < 2 ? dl1 : dl2, __fadd_rn(iq1_grid_value(gv, j), delta));
    }
  }
  template <int R>
  __device__ static void dotf(const uint8_t* p, int64_t b, const ActF& a, int nr, float (&acc)[R], const uint2*) {
    dotf_by_groups<FmtIQ1_M, R>(p, b, a, nr, acc);
  }
};

}  // namespace ds4::cuda::gemv_detail
