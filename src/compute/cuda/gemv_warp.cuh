#pragma once
// Warp-per-row CPU-order dot products for decode-sized work (internal to gemv*.cu).
//
// The staged kernels of gemv_exact.cuh give one thread a whole weight block's term: for the
// 2-bit formats that is hundreds of dependent instructions per thread and too few threads to
// hide them. Here one warp computes one (weight row, activation row) dot: the block's integer
// sums are split over a group of kSubs lanes (integer sums are exact in any order), the group's
// first lane forms the block's float term with the CPU's operations, and the terms are added
// in the CPU's order (8 partial sums folded, or one running sum). Bit-identical to the CPU.
#include <cstdint>
#include <type_traits>

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/gemv_formats.cuh"

namespace ds4::cuda::gemv_detail {

constexpr int kWarpMaxBlocks = 64;  // weight blocks per row of the MoE warp kernels (n_in <= 16384)
constexpr int kWarpMaxPasses = 8;   // longer rows use the staged kernels (bounds the terms' shared memory)

// IQ2_XXS: 8 groups of 32 weights per block; term d * d_act * bsum, one running sum, x 0.125.
struct WarpIQ2_XXS {
  static constexpr int kSubs = 8, kBE = 256, kBB = 66;
  static constexpr bool kEight = false;
  static constexpr float kPost = 0.125f;
  struct Raw {
    uint32_t aux0, aux1, d;
  };
  __device__ static Raw load(const uint8_t* blk, int j) {
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2 + 8 * j);
    return {__ldg(q) | (static_cast<uint32_t>(__ldg(q + 1)) << 16),
            __ldg(q + 2) | (static_cast<uint32_t>(__ldg(q + 3)) << 16),
            static_cast<uint32_t>(__ldg(reinterpret_cast<const uint16_t*>(blk)))};
  }
  // kSmemGrid: `grid` points to a copy in shared memory (a plain load; __ldg is for global).
  template <bool kSmemGrid = false>
  __device__ static void sums(const Raw& r, const int8_t* aq, const int16_t*, int j, const uint2* grid, int& i0,
                              int& i1) {
    const int ls = 2 * static_cast<int>(r.aux1 >> 28) + 1;
    const int4 v0 = ld4(aq + 32 * j), v1 = ld4(aq + 32 * j + 16);
    const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    int pos = 0, neg = 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 gv = kSmemGrid ? grid[byte_of(r.aux0, l)] : __ldg(grid + byte_of(r.aux0, l));
      const int g0 = static_cast<int>(gv.x), g1 = static_cast<int>(gv.y);
      int m0, m1;
      if constexpr (kSmemGrid) {  // the shared copy holds the grid only
        const uint32_t sg = FmtIQ2_XXS::signs8((r.aux1 >> (7 * l)) & 127u);
        m0 = sign_mask4(sg), m1 = sign_mask4(sg >> 4);
      } else {  // the masks beside the grid (kIq2SignMasks): one load for the parity and both masks
        const uint2 sm = __ldg(grid + kIq2SignMasks + ((r.aux1 >> (7 * l)) & 127u));
        m0 = static_cast<int>(sm.x), m1 = static_cast<int>(sm.y);
      }
      pos = dp4a(g0, av[2 * l], pos);
      neg = dp4a(m0 & g0, av[2 * l], neg);
      pos = dp4a(g1, av[2 * l + 1], pos);
      neg = dp4a(m1 & g1, av[2 * l + 1], neg);
    }
    i0 = (pos - 2 * neg) * ls;
    i1 = 0;
  }
  __device__ static float term(const Raw& r, float ad, int i0, int) {
    return __fadd_rn(0.0f, __fmul_rn(__fmul_rn(h2f(r.d), ad), static_cast<float>(i0)));
  }
};

// IQ2_XXS by byte permutes (DS4_CUDA_IQ2_NIB): a group's 8 weights as one grid word of 8
// nibbles (magnitude index) OR its sign word (bit 2 of each nibble), and two PRMTs select the
// signed bytes from kIq2Values: 2 table loads of 4 bytes (8 + 4 L1 lines) per 8 weights instead
// of 2 of 8 bytes (16 + 8 lines; the kernel is bound by the L1's wavefronts), one dp4a per 4
// weights instead of two. The same integer sum, so the same term. Global tables only.
struct WarpIQ2_XXSNib : WarpIQ2_XXS {
  template <bool kSmemGrid = false>
  __device__ static void sums(const Raw& r, const int8_t* aq, const int16_t*, int j, const uint2* grid, int& i0,
                              int& i1) {
    static_assert(!kSmemGrid, "the nibble tables are read from global memory");
    const int ls = 2 * static_cast<int>(r.aux1 >> 28) + 1;
    const int4 v0 = ld4(aq + 32 * j), v1 = ld4(aq + 32 * j + 16);
    const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const uint32_t* gn = reinterpret_cast<const uint32_t*>(grid + kIq2GridNib);
    const uint32_t* sn = reinterpret_cast<const uint32_t*>(grid + kIq2SignNib);
    int s = 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t sel = __ldg(gn + byte_of(r.aux0, l)) | __ldg(sn + ((r.aux1 >> (7 * l)) & 127u));
      s = dp4a(static_cast<int>(__byte_perm(kIq2ValuesLo, kIq2ValuesHi, sel)), av[2 * l], s);
      s = dp4a(static_cast<int>(__byte_perm(kIq2ValuesLo, kIq2ValuesHi, sel >> 16)), av[2 * l + 1], s);
    }
    i0 = s * ls;
    i1 = 0;
  }
};

// Q2_K: 16 groups of 16 weights per block; term (d_act*d)*isum - (d_act*dmin)*summs, 8 partials.
// Group g = 8h + 2s + half reads q bytes [32h + 16half, +16) at shift 2s, so groups g and g+2
// share their bytes: lane j (of 8) takes the pair s = 2t, 2t+1 (h = j/4, t = j/2 % 2, half = j%2)
// from one load of those bytes, and both groups' scales come from one scale word. The integer
// sums are exact in any order, so isum and summs are the CPU's whatever the lane split.
struct WarpQ2_K {
  static constexpr int kSubs = 8, kBE = 256, kBB = 84;
  static constexpr bool kEight = true;
  static constexpr float kPost = 1.0f;
  struct Raw {
    uint32_t sc2, q[4], dw;  // sc2: group g0's scale byte, then g0+2's in bits 16..23
  };
  __device__ static int group0(int j) { return 8 * (j / 4) + 4 * ((j / 2) % 2) + j % 2; }
  __device__ static Raw load(const uint8_t* blk, int j) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(blk);
    const int g0 = group0(j);
    const uint32_t* qw = w + 4 + 8 * (j / 4) + 4 * (j % 2);
    return {__ldg(w + g0 / 4) >> (8 * (g0 % 4)), {__ldg(qw), __ldg(qw + 1), __ldg(qw + 2), __ldg(qw + 3)}, __ldg(w + 20)};
  }
  template <bool = false>
  __device__ static void sums(const Raw& r, const int8_t* aq, const int16_t* bs, int j, const uint2*, int& i0,
                              int& i1) {
    const int h = j / 4, s0 = 2 * ((j / 2) % 2), half = j % 2, g0 = group0(j);
    const int4 v0 = ld4(aq + 128 * h + 32 * s0 + 16 * half), v1 = ld4(aq + 128 * h + 32 * (s0 + 1) + 16 * half);
    const int a0[4] = {v0.x, v0.y, v0.z, v0.w}, a1[4] = {v1.x, v1.y, v1.z, v1.w};
    int sub0 = 0, sub1 = 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      sub0 = dp4a(static_cast<int>((r.q[u] >> (2 * s0)) & 0x03030303u), a0[u], sub0);
      sub1 = dp4a(static_cast<int>((r.q[u] >> (2 * s0 + 2)) & 0x03030303u), a1[u], sub1);
    }
    const uint32_t sc0 = r.sc2 & 0xffu, sc1 = (r.sc2 >> 16) & 0xffu;
    i0 = static_cast<int>(sc0 & 0xfu) * sub0 + static_cast<int>(sc1 & 0xfu) * sub1;
    i1 = static_cast<int>(__ldg(bs + g0)) * static_cast<int>(sc0 >> 4) +
         static_cast<int>(__ldg(bs + g0 + 2)) * static_cast<int>(sc1 >> 4);
  }
  __device__ static float term(const Raw& r, float ad, int isum, int summs) {
    const float d = h2f(r.dw & 0xffffu), dmin = h2f(r.dw >> 16);
    const float dall = __fmul_rn(ad, d), dm = __fmul_rn(ad, dmin);
    return __fadd_rn(0.0f, __fsub_rn(__fmul_rn(dall, static_cast<float>(isum)), __fmul_rn(dm, static_cast<float>(summs))));
  }
};

// Q8_0: one lane per 32-weight block; term float(isum) * (d * d_act), 8 partials.
struct WarpQ8_0 {
  static constexpr int kSubs = 1, kBE = 32, kBB = 34;
  static constexpr bool kEight = true;
  static constexpr float kPost = 1.0f;
  struct Raw {
    uint32_t q[8], d;
  };
  __device__ static Raw load(const uint8_t* blk, int) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(blk);  // 2-byte aligned: 16-bit loads
    Raw r;
#pragma unroll
    for (int t = 0; t < 8; ++t) r.q[t] = __ldg(h + 1 + 2 * t) | (static_cast<uint32_t>(__ldg(h + 2 + 2 * t)) << 16);
    r.d = __ldg(h);
    return r;
  }
  template <bool = false>
  __device__ static void sums(const Raw& r, const int8_t* aq, const int16_t*, int, const uint2*, int& i0, int& i1) {
    const int4 v0 = ld4(aq), v1 = ld4(aq + 16);
    const int av[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    int s = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) s = dp4a(static_cast<int>(r.q[t]), av[t], s);
    i0 = s;
    i1 = 0;
  }
  __device__ static float term(const Raw& r, float ad, int i0, int) {
    return __fadd_rn(0.0f, __fmul_rn(static_cast<float>(i0), __fmul_rn(h2f(r.d), ad)));
  }
};

// Q8_0 with 4-byte loads (the default; DS4_CUDA_Q8_WIDE=0 for the 16-bit loads): blocks are 34 bytes,
// 2-byte aligned, so a lane loads the aligned words holding its block, 9 loads instead of 17
// 16-bit ones (ncu: the 16-bit loads kept the L1 70-80% busy at half the DRAM rate). No byte
// outside the block is read except, when the block starts 2 bytes into a word, that word's
// other half (inside the same allocation, which is at least 4-byte aligned). Same sums.
struct WarpQ8_0Wide : WarpQ8_0 {
  __device__ static Raw load(const uint8_t* blk, int) {
    Raw r;
    if ((reinterpret_cast<uintptr_t>(blk) & 3u) == 0) {  // d = low half of word 0; qs from byte 2
      const uint32_t* w = reinterpret_cast<const uint32_t*>(blk);
      uint32_t v[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) v[t] = __ldg(w + t);
      const uint32_t tail = __ldg(reinterpret_cast<const uint16_t*>(blk + 32));
      r.d = v[0] & 0xffffu;
#pragma unroll
      for (int t = 0; t < 7; ++t) r.q[t] = __funnelshift_r(v[t], v[t + 1], 16);
      r.q[7] = (v[7] >> 16) | (tail << 16);
    } else {  // d = high half of the word before; qs word-aligned
      const uint32_t* w = reinterpret_cast<const uint32_t*>(blk - 2);
      r.d = __ldg(w) >> 16;
#pragma unroll
      for (int t = 0; t < 8; ++t) r.q[t] = __ldg(w + 1 + t);
    }
    return r;
  }
};

// Q8_0 in the split layout (gemv.h q8_0_split_rows; DS4_CUDA_Q8_SPLIT=1; measured 4-5% slower on
// the H200 in decode, so off): a lane reads its block's 32 quants as two 16-byte loads and its scale from the row's
// scale array (the warp's 32 scales are one 64-byte read), 3 loads instead of 17. Same sums.
struct WarpQ8_0Split : WarpQ8_0 {
  static constexpr bool kSplit = true;
  __device__ static Raw load_split(const uint8_t* row, int b, int nb) {
    const uint4* q = reinterpret_cast<const uint4*>(row + 32 * static_cast<size_t>(b));
    const uint4 a = __ldg(q), c = __ldg(q + 1);
    Raw r;
    r.q[0] = a.x, r.q[1] = a.y, r.q[2] = a.z, r.q[3] = a.w;
    r.q[4] = c.x, r.q[5] = c.y, r.q[6] = c.z, r.q[7] = c.w;
    r.d = __ldg(reinterpret_cast<const uint16_t*>(row + 32 * static_cast<size_t>(nb)) + b);
    return r;
  }
};

// Block b of a row (nb blocks) for lane sub-index j: the file's layout, or the split one.
template <class W, class = void>
struct HasSplit : std::false_type {};
template <class W>
struct HasSplit<W, std::void_t<decltype(W::kSplit)>> : std::true_type {};
template <class W>
__device__ __forceinline__ typename W::Raw load_block(const uint8_t* row, int b, int nb, int j) {
  if constexpr (HasSplit<W>::value)
    return W::load_split(row, b, nb);
  else
    return W::load(row + static_cast<size_t>(b) * W::kBB, j);
}

// The terms of tsm[0..nb) added in the CPU's order (8 partials folded, or one running sum);
// every lane gets the sum.
template <class W>
__device__ __forceinline__ float warp_sum_terms(const float* tsm, int nb) {
  const int lane = threadIdx.x & 31;
  if constexpr (W::kEight) {
    float part = 0.0f;
    if (lane < 8)
      for (int b = lane; b < nb; b += 8) part = __fadd_rn(part, tsm[b]);
    float lv[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) lv[q] = __shfl_sync(0xffffffffu, part, q);
    return fold8(lv);
  } else {
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) acc = __fadd_rn(acc, tsm[b]);
    return acc;
  }
}

// Activation row `arow` of a (Q8_0 or Q8_K) from element `first` (grouped weight rows).
struct WarpAct {
  const int8_t* qs;
  const float* d;
  const int16_t* bs;
};
template <class W>
__device__ __forceinline__ WarpAct warp_act(const ActQ& a, int64_t arow, int64_t first) {
  return {a.qs + arow * a.n + first, a.d + (arow * a.n + first) / W::kBE,
          W::kBE == 256 ? a.bs + (arow * a.n + first) / 16 : nullptr};
}

// The CPU's vec_dot of weight row `row` (nb blocks) with activation `act`, before W::kPost, by
// one warp: every lane calls it and gets the result. Each pass loads and reduces 32/kSubs
// blocks (measured: preloading every pass first needs more registers and ran slower).
// tsm: nb floats of the warp's own shared memory. kSmemGrid: `grid` is in shared memory.
template <class W, bool kSmemGrid = false>
__device__ float warp_qdot(const uint8_t* row, const WarpAct& act, int nb, float* tsm, const uint2* grid) {
  constexpr int S = W::kSubs, kPerPass = 32 / S;
  const int lane = threadIdx.x & 31, j = lane % S;
#pragma unroll 4
  for (int b0 = 0; b0 < nb; b0 += kPerPass) {
    const int b = b0 + lane / S;
    int i0 = 0, i1 = 0;
    typename W::Raw raw;
    if (b < nb) {
      raw = load_block<W>(row, b, nb, j);
      W::template sums<kSmemGrid>(raw, act.qs + W::kBE * b, act.bs + 16 * b, j, grid, i0, i1);
    }
#pragma unroll
    for (int o = S / 2; o > 0; o >>= 1) {
      i0 += __shfl_xor_sync(0xffffffffu, i0, o);
      i1 += __shfl_xor_sync(0xffffffffu, i1, o);
    }
    if (j == 0 && b < nb) tsm[b] = W::term(raw, __ldg(act.d + b), i0, i1);
  }
  __syncwarp();
  const float r = warp_sum_terms<W>(tsm, nb);
  __syncwarp();  // tsm is free for the next call
  return r;
}

// R rows against the same activation in one pass loop (the MoE gate and up rows of one expert,
// R = 2, the default since measured; several output rows of one expert's down projection): each
// pass loads every row's blocks before any is reduced, so a lane has R independent load streams,
// and the activation block it reads serves all of them (ncu: the one-row kernel's activation
// reads were 4x its weight bytes). r[i] is warp_qdot's result for rows[i], bit for bit.
// tsm: R x nb floats.
template <class W, int R, bool kSmemGrid = false>
__device__ void warp_qdot_rows(const uint8_t* const (&rows)[R], const WarpAct& act, int nb, float* tsm,
                               const uint2* grid, float (&r)[R]) {
  constexpr int S = W::kSubs, kPerPass = 32 / S;
  const int lane = threadIdx.x & 31, j = lane % S;
#pragma unroll 2
  for (int b0 = 0; b0 < nb; b0 += kPerPass) {
    const int b = b0 + lane / S;
    int i0[R], i1[R];
    typename W::Raw w[R];
#pragma unroll
    for (int q = 0; q < R; ++q) i0[q] = 0, i1[q] = 0;
    if (b < nb) {
#pragma unroll
      for (int q = 0; q < R; ++q) w[q] = load_block<W>(rows[q], b, nb, j);
#pragma unroll
      for (int q = 0; q < R; ++q)
        W::template sums<kSmemGrid>(w[q], act.qs + W::kBE * b, act.bs + 16 * b, j, grid, i0[q], i1[q]);
    }
#pragma unroll
    for (int o = S / 2; o > 0; o >>= 1) {
#pragma unroll
      for (int q = 0; q < R; ++q) {
        i0[q] += __shfl_xor_sync(0xffffffffu, i0[q], o);
        i1[q] += __shfl_xor_sync(0xffffffffu, i1[q], o);
      }
    }
    if (j == 0 && b < nb) {
      const float ad = __ldg(act.d + b);
#pragma unroll
      for (int q = 0; q < R; ++q) tsm[q * nb + b] = W::term(w[q], ad, i0[q], i1[q]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int q = 0; q < R; ++q) r[q] = warp_sum_terms<W>(tsm + q * nb, nb);
  __syncwarp();  // tsm is free for the next call
}

// Two rows (the MoE gate and up rows of one expert): warp_qdot_rows with R = 2.
template <class W, bool kSmemGrid = false>
__device__ void warp_qdot2(const uint8_t* row_a, const uint8_t* row_b, const WarpAct& act, int nb, float* tsm,
                           const uint2* grid, float& ra, float& rb) {
  const uint8_t* const rows[2] = {row_a, row_b};
  float r[2];
  warp_qdot_rows<W, 2, kSmemGrid>(rows, act, nb, tsm, grid, r);
  ra = r[0], rb = r[1];
}

// Passes for nb blocks (a compile-time count of the supported shapes), 0 when none fits.
template <class W>
__host__ __device__ constexpr int warp_passes(int nb) {
  constexpr int kPerPass = 32 / W::kSubs;
  const int p = (nb + kPerPass - 1) / kPerPass;
  return p <= 1 ? 1 : p <= 2 ? 2 : p <= 4 ? 4 : p <= 8 ? 8 : 0;
}

}  // namespace ds4::cuda::gemv_detail
