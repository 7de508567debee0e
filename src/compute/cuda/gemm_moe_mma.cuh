#pragma once
// Tensor-core routed experts for many rows (internal to gemm_moe_mma.cu): the per-thread pieces
// for device and host, as gemm_mma.cuh (tests/unit/cuda_formats/test_gemm_moe_mma_host.cpp runs
// them on the host in the kernels' order with the PTX mma.sync model against quant::vec_dot).
//
// The (token, slot) pairs are grouped by expert on the device; a block of threads owns 128 rows
// of one expert's matrix x up to Geo::kBN of the expert's pairs (64 gate/up, 32 down), and reads
// each weight superblock once for them. Weight superblocks (256 values) are decoded by the block
// into int8 in shared memory, four values per 32-bit operation (signed_grid4, the Q2_K multiply),
// IQ2_XXS from a raw copy that cp.async brought in one superblock ahead (Geo::kStaged):
//  * IQ2_XXS (gate/up): value = grid byte * sign, |v| <= 43; per 32-value group one mma (C = 0)
//    gives the group's exact dot, times the group scale ls in integers: the superblock's bsum
//    exactly as quant's scalar kernel; term (d_w * d_a) * float(bsum) into one running sum (the
//    CPU's order), x 0.125 at the end.
//  * Q2_K (down): value = (scale & 15) * q <= 45, so 8 chained mmas give isum exactly; a second
//    chain against the mins (scale >> 4, one per 16 values, broadcast) gives summs = sum_j
//    m_j * bsums_j exactly; term (d_a*d)*isum - (d_a*dmin)*summs into partial (superblock % 8):
//    superblocks visited partial by partial in gemm_mma.cuh's segment order, 4 live slots, the
//    CPU's fold.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "compute/cuda/gemm_mma.cuh"
#include "compute/cuda/swiglu.cuh"

namespace ds4::cuda::moe_mma {

using mma::f_add;
using mma::f_mul;
using mma::f_sub;
using mma::ld_f32;
using mma::ld_u32;
using mma::seg_partial;
using mma::seg_slot;

constexpr int kBM = 128, kThreads = 256;  // 8 warps: 4 along M x 2 along N
constexpr int kMT = 2;                    // 16-row tiles per warp (32 rows)
constexpr int kPitch = 256 + 16;          // bytes per decoded row (one superblock) in shared memory

// Tile geometry per format. IQ2_XXS (gate/up) keeps one float sum per output, so a block takes
// 64 pairs (a warp 32 x 32): an expert's weights are decoded about once per chunk at the ~48
// pairs per expert of a 2K-token Flash chunk. Q2_K (down) keeps 4 live partial slots, so its
// warps stay at 32 x 16 (32 pairs per block) to fit the registers.
template <bool Q2K>
struct Geo {
  static constexpr int kBN = Q2K ? 32 : 64;
  static constexpr int kNT = kBN / 16;  // 8-column tiles per warp (2 warps along N)
  // The decoded weights of the current superblock (one buffer): int8 rows, then per row the
  // group scales (IQ2_XXS: ls [row][8]) or mins (Q2_K: [row][16]), f32 d, f32 dmin (Q2_K).
  static constexpr int kWOff = 0;
  static constexpr int kSOff = kWOff + kBM * kPitch;
  static constexpr int kDOff = kSOff + kBM * 16;
  static constexpr int kMOff = kDOff + kBM * 4;
  static constexpr int kDecBytes = kMOff + kBM * 4;
  // A raw stage (two, filled by cp.async a superblock ahead): each row's superblock bytes as
  // copied from the 16-byte boundary at or below it (raw_lead), then the activation rows (Q8_K
  // quants, the tile's tokens) and their f32 d.
  // Q2_K decodes straight from global memory (kRawChunks 0): with its 8 superblocks per row
  // (the down projection's 2048 inputs) the staged copy measured slower on the H200 (Nsight,
  // 8 layers at 2K: 3.25 against 2.88 ms), while IQ2_XXS gate/up gained (3.14 against 3.94 ms).
  static constexpr bool kStaged = !Q2K;
  static constexpr int kSbBytes = Q2K ? 84 : 66;
  static constexpr int kRawChunks = kStaged ? 5 : 0;  // 16-byte pieces: lead (<= 14) + 66 bytes fit
  static constexpr int kRawPitch = 16 * kRawChunks;
  static constexpr int kRawWOff = 0;
  static constexpr int kAOff = (kRawWOff + kBM * kRawPitch + 15) / 16 * 16;
  static constexpr int kAdOff = kAOff + kBN * kPitch;
  static constexpr int kStageBytes = (kAdOff + kBN * 4 + 15) / 16 * 16;
  static constexpr int kSmemBytes = kDecBytes + 2 * kStageBytes;
  static constexpr int kItemsW = kBM * 8;   // (row, 32-value chunk) decode items per superblock
  static constexpr int kItemsA = kBN * 16;  // 16-byte activation pieces per stage
  static_assert(kDecBytes % 16 == 0 && kAOff % 16 == 0 && kStageBytes % 16 == 0, "16-byte aligned parts");
  static_assert(kItemsW % kThreads == 0 && kItemsA % kThreads == 0, "whole items per thread");
};

// Raw copy of a weight superblock at blk (IQ2_XXS: 66 bytes, 2-byte aligned; Q2_K: 84, 4-byte
// aligned) as kRawChunks 16-byte pieces starting raw_lead(blk) bytes below it: piece w takes
// raw_piece_bytes of them from the source (the rest zeros), so nothing outside
// [blk - raw_lead, blk + kSbBytes) is read; the superblock sits at byte raw_lead of the copy.
__host__ __device__ inline int raw_lead(const uint8_t* blk) { return static_cast<int>(reinterpret_cast<uintptr_t>(blk) & 15u); }
template <bool Q2K>
__host__ __device__ inline int raw_piece_bytes(int lead, int w) {
  const int rem = lead + Geo<Q2K>::kSbBytes - 16 * w;
  return rem >= 16 ? 16 : rem > 0 ? rem : 0;
}

__host__ __device__ inline float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__host__ __device__ inline uint16_t ld_u16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
__host__ __device__ inline void st_u32(uint8_t* p, uint32_t v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  std::memcpy(p, &v, 4);
#endif
}
__host__ __device__ inline void st_f32(uint8_t* p, float v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<float*>(p) = v;
#else
  std::memcpy(p, &v, 4);
#endif
}
__host__ __device__ inline int popc7(uint32_t v) {
#ifdef __CUDA_ARCH__
  return __popc(v & 127u);
#else
  int c = 0;
  for (int i = 0; i < 7; ++i) c += (v >> i) & 1u;
  return c;
#endif
}
// Bits 0..3 of x to the low bit of bytes 0..3 (the four shifted copies do not overlap).
__host__ __device__ inline uint32_t spread4(uint32_t x) { return ((x & 15u) * 0x00204081u) & 0x01010101u; }
// Four grid bytes g (each 1..255: every IQ2_XXS grid value is 8, 25 or 43) negated where the
// matching bit of the 4-bit sign nibble is set, as int8: (g ^ 0xff) + 1 = 256 - g per byte,
// which never carries into the next byte because g >= 1.
__host__ __device__ inline uint32_t signed_grid4(uint32_t g, uint32_t nibble) {
  const uint32_t one = spread4(nibble);
  return (g ^ (one * 0xffu)) + one;
}
__host__ __device__ inline float i2f(int v) {
#ifdef __CUDA_ARCH__
  return __int2float_rn(v);
#else
  return static_cast<float>(v);  // round to nearest even
#endif
}

// ---- decode of one (row, chunk) item into the decoded buffer `st` ---------------------------

// IQ2_XXS superblock `blk` (66 bytes, 2-byte aligned), 32-value group c (null blk: zeros).
// grid: the 256 grid entries (8 unsigned bytes each).
__host__ __device__ inline void decode_iq2_item(const uint8_t* blk, int c, const uint64_t* grid, uint8_t* st, int row) {
  uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int ls = 0;
  float d = 0.0f;
  if (blk) {
    const uint8_t* q = blk + 2 + 8 * c;
    const uint32_t aux0 = ld_u16(q) | (static_cast<uint32_t>(ld_u16(q + 2)) << 16);
    const uint32_t aux1 = ld_u16(q + 4) | (static_cast<uint32_t>(ld_u16(q + 6)) << 16);
    ls = 2 * static_cast<int>(aux1 >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      const uint64_t g = grid[(aux0 >> (8 * l)) & 255u];
      const uint32_t s7 = (aux1 >> (7 * l)) & 127u;
      const uint32_t sg = s7 | ((static_cast<uint32_t>(popc7(s7)) & 1u) << 7);
      w[2 * l] = signed_grid4(static_cast<uint32_t>(g), sg);
      w[2 * l + 1] = signed_grid4(static_cast<uint32_t>(g >> 32), sg >> 4);
    }
    d = f16(ld_u16(blk));
  }
  using G = Geo<false>;
  uint8_t* dst = st + G::kWOff + row * kPitch + 32 * c;
  for (int t = 0; t < 8; ++t) st_u32(dst + 4 * t, w[t]);
  st[G::kSOff + row * 16 + c] = static_cast<uint8_t>(ls);
  if (c == 0) st_f32(st + G::kDOff + row * 4, d);
}

// Q2_K superblock `blk` (84 bytes, 4-byte aligned), 32-value chunk c = 4h + s (null: zeros).
__host__ __device__ inline void decode_q2k_item(const uint8_t* blk, int c, uint8_t* st, int row) {
  uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int sc0 = 0, sc1 = 0;
  float d = 0.0f, dm = 0.0f;
  if (blk) {
    const int h = c / 4, s = c % 4;
    const uint32_t scw = ld_u32(blk + 4 * (2 * h + s / 2));
    sc0 = static_cast<int>((scw >> (16 * (s % 2))) & 0xffu);
    sc1 = static_cast<int>((scw >> (16 * (s % 2) + 8)) & 0xffu);
    for (int t = 0; t < 8; ++t) {
      const uint32_t qw = ld_u32(blk + 16 + 32 * h + 4 * t);  // qs bytes 32h + 4t .. +3
      const uint32_t mul = static_cast<uint32_t>((t < 4 ? sc0 : sc1) & 15);  // bytes 0..15: half 0, 16..31: half 1
      // Four 2-bit quants times the 4-bit scale: each byte <= 45, so one multiply, no carries.
      w[t] = ((qw >> (2 * s)) & 0x03030303u) * mul;
    }
    const uint32_t dd = ld_u32(blk + 80);
    d = f16(static_cast<uint16_t>(dd & 0xffffu));
    dm = f16(static_cast<uint16_t>(dd >> 16));
  }
  using G = Geo<true>;
  uint8_t* dst = st + G::kWOff + row * kPitch + 32 * c;
  for (int t = 0; t < 8; ++t) st_u32(dst + 4 * t, w[t]);
  st[G::kSOff + row * 16 + 2 * c] = static_cast<uint8_t>(sc0 >> 4);
  st[G::kSOff + row * 16 + 2 * c + 1] = static_cast<uint8_t>(sc1 >> 4);
  if (c == 0) {
    st_f32(st + G::kDOff + row * 4, d);
    st_f32(st + G::kMOff + row * 4, dm);
  }
}

// Activation piece i (< kItemsA) of superblock sb: Q8_K quants of the tile's token tok = i / 16
// at row `arow` (-1: padding) of qs (n values per row), and the token's d (part 0 only).
template <bool Q2K>
__host__ __device__ inline void act_piece(const int8_t* qs, const float* d, int64_t n, int64_t arow, int sb, int i,
                                          uint8_t* st) {
  using G = Geo<Q2K>;
  const int tok = i / 16, part = i % 16;
  uint32_t v[4] = {0, 0, 0, 0};
  float s = 0.0f;
  if (arow >= 0) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(qs + arow * n + 256 * static_cast<int64_t>(sb) + 16 * part);
    for (int t = 0; t < 4; ++t) v[t] = ld_u32(src + 4 * t);
    s = d[arow * (n / 256) + sb];
  }
  uint8_t* dst = st + G::kAOff + tok * kPitch + 16 * part;
  for (int t = 0; t < 4; ++t) st_u32(dst + 4 * t, v[t]);
  if (part == 0) st_f32(st + G::kAdOff + tok * 4, s);
}

// ---- fragments (the PTX layout of gemm_mma.cuh's Frags) -------------------------------------

template <bool Q2K>
struct Frags {
  uint32_t a[kMT][4];
  uint32_t b[Geo<Q2K>::kNT][2];
};
// k step ks (32 values): A from the decoded weights, B from the stage's activation rows.
template <bool Q2K>
__host__ __device__ inline void load_frags(const uint8_t* dec, const uint8_t* st, int lane, int warp, int ks,
                                           Frags<Q2K>& f) {
  using G = Geo<Q2K>;
  const int gid = lane >> 2, tig = lane & 3;
  const int wm = (warp & 3) * (16 * kMT), wn = (warp >> 2) * (8 * G::kNT);
  for (int mt = 0; mt < kMT; ++mt) {
    const uint8_t* p0 = dec + G::kWOff + (wm + 16 * mt + gid) * kPitch + 32 * ks + 4 * tig;
    const uint8_t* p1 = p0 + 8 * kPitch;
    f.a[mt][0] = ld_u32(p0);
    f.a[mt][1] = ld_u32(p1);
    f.a[mt][2] = ld_u32(p0 + 16);
    f.a[mt][3] = ld_u32(p1 + 16);
  }
  for (int nt = 0; nt < G::kNT; ++nt) {
    const uint8_t* p = st + G::kAOff + (wn + 8 * nt + gid) * kPitch + 32 * ks + 4 * tig;
    f.b[nt][0] = ld_u32(p);
    f.b[nt][1] = ld_u32(p + 16);
  }
}
// Q2_K: the mins as an A operand for k step ks: values 0..15 of the step belong to 16-group 2ks,
// 16..31 to 2ks + 1 (a0/a1: k < 16, a2/a3: k >= 16).
__host__ __device__ inline void load_min_frags(const uint8_t* dec, int lane, int warp, int ks, uint32_t am[kMT][4]) {
  using G = Geo<true>;
  const int gid = lane >> 2;
  const int wm = (warp & 3) * (16 * kMT);
  for (int mt = 0; mt < kMT; ++mt) {
    const int r = wm + 16 * mt + gid;
    const uint32_t m00 = dec[G::kSOff + r * 16 + 2 * ks], m01 = dec[G::kSOff + r * 16 + 2 * ks + 1];
    const uint32_t m10 = dec[G::kSOff + (r + 8) * 16 + 2 * ks], m11 = dec[G::kSOff + (r + 8) * 16 + 2 * ks + 1];
    am[mt][0] = m00 * 0x01010101u;
    am[mt][1] = m10 * 0x01010101u;
    am[mt][2] = m01 * 0x01010101u;
    am[mt][3] = m11 * 0x01010101u;
  }
}

__host__ __device__ inline int elem_row(int lane, int warp, int mt, int i) {
  return (warp & 3) * (16 * kMT) + 16 * mt + (lane >> 2) + 8 * (i >> 1);
}
template <bool Q2K>
__host__ __device__ inline int elem_col(int lane, int warp, int nt, int i) {
  return (warp >> 2) * (8 * Geo<Q2K>::kNT) + 8 * nt + 2 * (lane & 3) + (i & 1);
}

// ---- per-lane accumulators and the superblock epilogues ------------------------------------

template <bool Q2K>
struct IAcc {  // integer sums of the current superblock
  int v[kMT][Geo<Q2K>::kNT][4];
  int m[kMT][Geo<Q2K>::kNT][4];  // Q2_K summs
};
template <bool Q2K>
struct FAcc {  // float slots (IQ2_XXS: one)
  static constexpr int kSlots = Q2K ? 4 : 1;
  float v[kSlots][kMT][Geo<Q2K>::kNT][4];
};

template <bool Q2K>
__host__ __device__ inline void clear(IAcc<Q2K>& a) {
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < Geo<Q2K>::kNT; ++nt)
      for (int i = 0; i < 4; ++i) a.v[mt][nt][i] = 0, a.m[mt][nt][i] = 0;
}

// IQ2_XXS: the group scales ls of the lane's rows for the stage, read once per superblock:
// ls[mt][h] holds row elem_row(.., mt, 2h)'s 8 scales (groups 0..3, 4..7 as two words).
struct Ls {
  uint32_t w[kMT][2][2];
};
__host__ __device__ inline void load_ls(const uint8_t* dec, int lane, int warp, Ls& ls) {
  for (int mt = 0; mt < kMT; ++mt)
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = dec + Geo<false>::kSOff + elem_row(lane, warp, mt, 2 * h) * 16;
      ls.w[mt][h][0] = ld_u32(p);
      ls.w[mt][h][1] = ld_u32(p + 4);
    }
}
// IQ2_XXS, group ks: bsum += ls(row, ks) * dot.
__host__ __device__ inline void iq2_group(IAcc<false>& a, const Ls& ls, int ks, int mt, int nt, const int d[4]) {
  for (int i = 0; i < 4; ++i) {
    const int sc = static_cast<int>((ls.w[mt][i >> 1][ks >> 2] >> (8 * (ks & 3))) & 0xffu);
    a.v[mt][nt][i] += sc * d[i];
  }
}
// IQ2_XXS, end of a superblock: sum += (d_w * d_a) * float(bsum).
__host__ __device__ inline void iq2_term(FAcc<false>& f, const IAcc<false>& a, const uint8_t* dec, const uint8_t* st,
                                         int lane, int warp) {
  using G = Geo<false>;
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < G::kNT; ++nt)
      for (int i = 0; i < 4; ++i) {
        const float dw = ld_f32(dec + G::kDOff + elem_row(lane, warp, mt, i) * 4);
        const float da = ld_f32(st + G::kAdOff + elem_col<false>(lane, warp, nt, i) * 4);
        f.v[0][mt][nt][i] = f_add(f.v[0][mt][nt][i], f_mul(f_mul(dw, da), i2f(a.v[mt][nt][i])));
      }
}
// Q2_K, end of a superblock: slot += (d_a*d)*isum - (d_a*dmin)*summs.
template <int SLOT>
__host__ __device__ inline void q2k_term(FAcc<true>& f, const IAcc<true>& a, const uint8_t* dec, const uint8_t* st,
                                         int lane, int warp) {
  using G = Geo<true>;
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < G::kNT; ++nt)
      for (int i = 0; i < 4; ++i) {
        const int r = elem_row(lane, warp, mt, i);
        const float da = ld_f32(st + G::kAdOff + elem_col<true>(lane, warp, nt, i) * 4);
        const float dall = f_mul(da, ld_f32(dec + G::kDOff + r * 4)), dmin = f_mul(da, ld_f32(dec + G::kMOff + r * 4));
        const float t = f_sub(f_mul(dall, i2f(a.v[mt][nt][i])), f_mul(dmin, i2f(a.m[mt][nt][i])));
        f.v[SLOT][mt][nt][i] = f_add(f.v[SLOT][mt][nt][i], t);
      }
}

template <int K, bool Q2K>
__host__ __device__ inline void clear_slot(FAcc<Q2K>& f) {
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < Geo<Q2K>::kNT; ++nt)
      for (int i = 0; i < 4; ++i) f.v[K][mt][nt][i] = 0.0f;
}
template <int A, int B>
__host__ __device__ inline void fold(FAcc<true>& f) {
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < Geo<true>::kNT; ++nt)
      for (int i = 0; i < 4; ++i) f.v[A][mt][nt][i] = f_add(f.v[A][mt][nt][i], f.v[B][mt][nt][i]);
}
// gemm_mma.cuh's schedule: slot seg_slot(S) is cleared before segment S; after it, the folds.
template <int S>
__host__ __device__ inline void end_segment(FAcc<true>& f) {
  if constexpr (S == 1) {
    fold<0, 1>(f);
  } else if constexpr (S == 3) {
    fold<1, 2>(f);
    fold<0, 1>(f);
  } else if constexpr (S == 5) {
    fold<1, 2>(f);
  } else if constexpr (S == 7) {
    fold<2, 3>(f);
    fold<1, 2>(f);
    fold<0, 1>(f);
  }
}
// Superblocks of partial seg_partial(S) among nsb.
__host__ __device__ inline int seg_count_sb(int nsb, int s) {
  const int p = seg_partial(s);
  return p < nsb ? (nsb - p + 7) / 8 : 0;
}
// The idx-th superblock in visiting order: Q2_K segment order, IQ2_XXS natural order.
__host__ __device__ inline int sb_at(bool eight, int nsb, int idx) {
  if (!eight) return idx;
  for (int s = 0; s < 8; ++s) {
    const int c = seg_count_sb(nsb, s);
    if (idx < c) return seg_partial(s) + 8 * idx;
    idx -= c;
  }
  return -1;
}

// ---- routing ---------------------------------------------------------------------------------

// Tile y of the grouped launch: the expert e with tile0[e] <= y < tile0[e+1] (tile0: n_expert+1
// exclusive prefix sums of ceil(count/kBN), the format's kBN); -1 past the last tile.
__host__ __device__ inline int tile_expert(const int32_t* tile0, int n_expert, int y) {
  if (y >= tile0[n_expert]) return -1;
  int lo = 0, hi = n_expert;  // tile0[lo] <= y < tile0[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tile0[mid] <= y)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace ds4::cuda::moe_mma
