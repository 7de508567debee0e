#pragma once
// Tensor-core Q8_0 GEMM for many activation rows (internal to gemm_mma.cu): the per-thread
// pieces, written once for the device and the host. The kernel in gemm_mma.cu is these functions
// plus cp.async, mma.sync and barriers; tests/unit/cuda_formats/test_gemm_mma_host.cpp runs the
// same functions on the host in the kernel's lane/register order, with an mma.sync model written
// from the PTX ISA's fragment tables, against quant::vec_dot.
//
// Exactness. The CPU's Q8_0 dot (quant/dot_avx2_int.cpp, the scalar kernel, gemm_avx512.cpp)
// forms per 32-weight block b the term float(isum_b) * (d_w * d_a) and adds it into partial
// p = b % 8 (starting from 0, blocks in increasing order), then folds the partials as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Here:
//  * one mma.sync m16n8k32 (s8 x s8 -> s32) is one block's exact isum for a 16 x 8 tile; the
//    accumulator starts at 0x4B400000 (1.5 * 2^23), so the s32 result read as f32 is
//    1.5 * 2^23 + isum (|isum| <= 32*128*128 < 2^22) and one exact subtraction gives float(isum);
//  * the K axis is permuted: segment s (8 of them) holds the blocks of partial kSegPartial[s]
//    (0,4,2,6,1,5,3,7) in increasing order, padded with zero blocks (qs 0, d 0: term +0, which
//    leaves a partial unchanged) to a common multiple of kKB. A partial is accumulated in one of
//    4 register slots (kSegSlot) and folded as soon as the tree allows, so at most 4 are live
//    and the result is fold8 of the CPU's partials bit for bit.
// Layouts (built by the repack kernels, gemm_mma.cu): weights qs [row][KP*32] int8 and d
// [row][KP] f32 (f16 widened exactly); activations qs [row][group][KP*32], d [row][group][KP],
// rows padded with zero rows to whole tiles (qs 0, d 0), KP = 8 * C permuted blocks per group.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

// Unrolled in device code; the host compiler (the host test) knows no such pragma.
#ifdef __CUDA_ARCH__
#define DS4_MMA_UNROLL _Pragma("unroll")
#else
#define DS4_MMA_UNROLL
#endif

namespace ds4::cuda::mma {

constexpr int kBM = 128;               // output rows (weight rows) per block of threads
constexpr int kBN = 64;                // activation rows (tokens) per block of threads
constexpr int kKB = 4;                 // Q8_0 blocks (32 values each) per pipeline stage
constexpr int kStages = 3;             // cp.async stages in flight
constexpr int kThreads = 512;          // 16 warps: 4 along M x 4 along N, 32 x 16 outputs each
constexpr int kMT = 2, kNT = 2;        // m16 tiles and n8 tiles per warp
constexpr int kPitch = kKB * 32 + 16;  // bytes per staged row (16 bytes of padding: no bank conflicts)
constexpr int kWsOff = 0;
constexpr int kAsOff = kWsOff + kBM * kPitch;
constexpr int kWdOff = kAsOff + kBN * kPitch;
constexpr int kAdOff = kWdOff + kBM * kKB * 4;
constexpr int kStageBytes = kAdOff + kBN * kKB * 4;
constexpr int kSmemBytes = kStages * kStageBytes;
// 16-byte pieces one stage copies: weight qs, activation qs, weight d, activation d.
constexpr int kPiecesWq = kBM * kKB * 2, kPiecesAq = kBN * kKB * 2, kPiecesWd = kBM * kKB / 4,
              kPiecesAd = kBN * kKB / 4;
constexpr int kPieces = kPiecesWq + kPiecesAq + kPiecesWd + kPiecesAd;
constexpr int kBiasBits = 0x4B400000;  // 1.5 * 2^23 as f32 bits
constexpr float kBias = 12582912.0f;
static_assert(kKB == 4, "stage_piece copies one row's kKB scales as one 16-byte piece");
static_assert(kThreads == 32 * 4 * 4 && kBM == 4 * 16 * kMT && kBN == 4 * 8 * kNT, "warp grid 4 x 4");

__host__ __device__ constexpr int seg_partial(int s) {
  return s == 0 ? 0 : s == 1 ? 4 : s == 2 ? 2 : s == 3 ? 6 : s == 4 ? 1 : s == 5 ? 5 : s == 6 ? 3 : 7;
}
__host__ __device__ constexpr int seg_slot(int s) {
  return s == 0 ? 0 : s == 1 ? 1 : s == 2 ? 1 : s == 3 ? 2 : s == 4 ? 1 : s == 5 ? 2 : s == 6 ? 2 : 3;
}

// K layout of one group's n_in values.
struct KLayout {
  int nb = 0;  // Q8_0 blocks
  int C = 0;   // permuted blocks per segment (a multiple of kKB)
  int KP = 0;  // 8 * C
};
__host__ __device__ inline KLayout k_layout(int64_t n_in) {
  KLayout L;
  L.nb = static_cast<int>(n_in / 32);
  const int per = (L.nb + 7) / 8;
  L.C = (per + kKB - 1) / kKB * kKB;
  L.KP = 8 * L.C;
  return L;
}
// The original block at permuted position q, or -1 for a padding block.
__host__ __device__ inline int perm_source(const KLayout& L, int q) {
  const int s = q / L.C, j = q - s * L.C;
  const int b = seg_partial(s) + 8 * j;
  return b < L.nb ? b : -1;
}

__host__ __device__ inline uint32_t ld_u32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
__host__ __device__ inline float ld_f32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const float*>(p);
#else
  float v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// Segment of partial p (the inverse of seg_partial).
__host__ __device__ constexpr int partial_seg(int p) {
  return p == 0 ? 0 : p == 4 ? 1 : p == 2 ? 2 : p == 6 ? 3 : p == 1 ? 4 : p == 5 ? 5 : p == 3 ? 6 : 7;
}
// Permuted position of original block b (< nb).
__host__ __device__ inline int perm_pos(const KLayout& L, int b) { return partial_seg(b % 8) * L.C + b / 8; }
// Real blocks in segment s.
__host__ __device__ inline int seg_count(const KLayout& L, int s) {
  const int p = seg_partial(s);
  return p < L.nb ? (L.nb - p + 7) / 8 : 0;
}
// Permuted position of padding block k (< KP - nb): the segments' tails in segment order.
__host__ __device__ inline int pad_pos(const KLayout& L, int k) {
  for (int s = 0; s < 8; ++s) {
    const int cnt = seg_count(L, s), pad = L.C - cnt;
    if (k < pad) return s * L.C + cnt + k;
    k -= pad;
  }
  return -1;  // k out of range (not reached)
}
// Item x (< KP) of a repacked row: x < nb is original block x, the rest the padding blocks, so
// that consecutive threads read consecutive source blocks. Returns the permuted position.
__host__ __device__ inline int item_pos(const KLayout& L, int x) {
  return x < L.nb ? perm_pos(L, x) : pad_pos(L, x - L.nb);
}

// Repack of weight row o's permuted block q: `src` = the row's Q8_0 bytes (2-byte aligned) or
// null for a padding row; writes 32 qs bytes at dq (4-byte aligned) and the f32 scale at *dd.
__host__ __device__ inline void repack_weight_block(const uint8_t* src, const KLayout& L, int q, uint8_t* dq,
                                                    float* dd) {
  const int b = src ? perm_source(L, q) : -1;
  uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float d = 0.0f;
  if (b >= 0) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src + static_cast<size_t>(b) * 34);
    DS4_MMA_UNROLL
    for (int t = 0; t < 8; ++t)
      w[t] = static_cast<uint32_t>(h[1 + 2 * t]) | (static_cast<uint32_t>(h[2 + 2 * t]) << 16);
    d = __half2float(__ushort_as_half(h[0]));
  }
#ifdef __CUDA_ARCH__
  DS4_MMA_UNROLL
  for (int t = 0; t < 8; ++t) reinterpret_cast<uint32_t*>(dq)[t] = w[t];
#else
  std::memcpy(dq, w, 32);
#endif
  *dd = d;
}

// Repack of activation block: `qs`/`d` = the row's group's quantize_acts values (qs 16-byte
// aligned) or null for a padding row.
__host__ __device__ inline void repack_act_block(const int8_t* qs, const float* d, const KLayout& L, int q, uint8_t* dq,
                                                 float* dd) {
  const int b = qs ? perm_source(L, q) : -1;
  uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float s = 0.0f;
  if (b >= 0) {
    DS4_MMA_UNROLL
    for (int t = 0; t < 8; ++t) w[t] = ld_u32(reinterpret_cast<const uint8_t*>(qs + 32 * b + 4 * t));
    s = d[b];
  }
#ifdef __CUDA_ARCH__
  DS4_MMA_UNROLL
  for (int t = 0; t < 8; ++t) reinterpret_cast<uint32_t*>(dq)[t] = w[t];
#else
  std::memcpy(dq, w, 32);
#endif
  *dd = s;
}

// The operands of one block of threads: rows [o0, o0+kBM) of the repacked weights and rows
// [t0, t0+kBN) of the repacked activations, group column base `acol` (permuted blocks).
struct TileSrc {
  const int8_t* wq;  // repacked weight qs, row 0
  const float* wd;   // repacked weight d, row 0
  const int8_t* aq;  // repacked activation qs, row 0
  const float* ad;   // repacked activation d, row 0
  int64_t o0, t0;    // first weight row / activation row of the tile
  int64_t a_pitch;   // permuted blocks per activation row (groups * KP)
  int64_t acol;      // group * KP
  int KP;
};

// Piece i (< kPieces) of the stage holding permuted blocks [q0, q0+kKB): its global source and
// its byte offset inside the stage.
__host__ __device__ inline const void* stage_piece(const TileSrc& T, int q0, int i, int* dst) {
  if (i < kPiecesWq) {
    const int row = i / (kKB * 2), part = i % (kKB * 2);
    *dst = kWsOff + row * kPitch + part * 16;
    return T.wq + (T.o0 + row) * static_cast<int64_t>(T.KP) * 32 + static_cast<int64_t>(q0) * 32 + part * 16;
  }
  i -= kPiecesWq;
  if (i < kPiecesAq) {
    const int row = i / (kKB * 2), part = i % (kKB * 2);
    *dst = kAsOff + row * kPitch + part * 16;
    return T.aq + ((T.t0 + row) * T.a_pitch + T.acol + q0) * 32 + part * 16;
  }
  i -= kPiecesAq;
  if (i < kPiecesWd) {  // kKB == 4: one piece per row
    *dst = kWdOff + i * kKB * 4;
    return T.wd + (T.o0 + i) * static_cast<int64_t>(T.KP) + q0;
  }
  i -= kPiecesWd;
  *dst = kAdOff + i * kKB * 4;
  return T.ad + (T.t0 + i) * T.a_pitch + T.acol + q0;
}

// One lane's operands of block kb of a stage (PTX ISA, mma.m16n8k32 .s8, gid = lane/4,
// tig = lane%4): A (16 x 32, row): a0 = A[gid][4tig..], a1 = A[gid+8][4tig..], a2 = A[gid][16+4tig..],
// a3 = A[gid+8][16+4tig..]; B (32 x 8, col): b0 = B[4tig..][gid], b1 = B[16+4tig..][gid].
// A = weight rows (M), B = activation rows (N). dw: the scales of the lane's rows gid, gid+8 of
// each m tile; da: those of its columns 2tig, 2tig+1 of each n tile.
struct Frags {
  uint32_t a[kMT][4];
  uint32_t b[kNT][2];
  float dw[kMT][2];
  float da[kNT][2];
};
__host__ __device__ inline void load_frags(const uint8_t* st, int lane, int warp, int kb, Frags& f) {
  const int gid = lane >> 2, tig = lane & 3;
  const int wm = (warp & 3) * (16 * kMT), wn = (warp >> 2) * (8 * kNT);
  DS4_MMA_UNROLL
  for (int mt = 0; mt < kMT; ++mt) {
    const int r = wm + 16 * mt + gid;
    const uint8_t* p0 = st + kWsOff + r * kPitch + kb * 32 + 4 * tig;
    const uint8_t* p1 = p0 + 8 * kPitch;
    f.a[mt][0] = ld_u32(p0);
    f.a[mt][1] = ld_u32(p1);
    f.a[mt][2] = ld_u32(p0 + 16);
    f.a[mt][3] = ld_u32(p1 + 16);
    f.dw[mt][0] = ld_f32(st + kWdOff + (r * kKB + kb) * 4);
    f.dw[mt][1] = ld_f32(st + kWdOff + ((r + 8) * kKB + kb) * 4);
  }
  DS4_MMA_UNROLL
  for (int nt = 0; nt < kNT; ++nt) {
    const uint8_t* p = st + kAsOff + (wn + 8 * nt + gid) * kPitch + kb * 32 + 4 * tig;
    f.b[nt][0] = ld_u32(p);
    f.b[nt][1] = ld_u32(p + 16);
    const int c = wn + 8 * nt + 2 * tig;
    f.da[nt][0] = ld_f32(st + kAdOff + (c * kKB + kb) * 4);
    f.da[nt][1] = ld_f32(st + kAdOff + ((c + 1) * kKB + kb) * 4);
  }
}

// Accumulator element i (c0..c3) of the lane for tile (mt, nt): row gid (+8 for c2, c3), column
// 2tig (+1 for c1, c3); returned relative to the block of threads' tile.
__host__ __device__ inline int elem_row(int lane, int warp, int mt, int i) {
  return (warp & 3) * (16 * kMT) + 16 * mt + (lane >> 2) + 8 * (i >> 1);
}
__host__ __device__ inline int elem_col(int lane, int warp, int nt, int i) {
  return (warp >> 2) * (8 * kNT) + 8 * nt + 2 * (lane & 3) + (i & 1);
}

// The lane's accumulators: 4 slots x its 32 outputs.
struct Acc {
  float v[4][kMT][kNT][4];
};

// One IEEE operation each, round to nearest even (the host side is compiled with
// -ffp-contract=off, as src/quant is).
__host__ __device__ __forceinline__ float f_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float f_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ float f_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ float bits_as_f32(int v) {
#ifdef __CUDA_ARCH__
  return __int_as_float(v);
#else
  float f;
  std::memcpy(&f, &v, 4);
  return f;
#endif
}

// acc += float(isum) * (d_w * d_a), isum read from the biased s32 result.
__host__ __device__ __forceinline__ float add_term(float acc, int biased, float dw, float da) {
  const float f = f_sub(bits_as_f32(biased), kBias);
  return f_add(acc, f_mul(f, f_mul(dw, da)));
}

// The epilogue of one mma: d = the 4 biased results of tile (mt, nt).
template <int SLOT>
__host__ __device__ __forceinline__ void epilogue(Acc& acc, const Frags& f, int mt, int nt, const int d[4]) {
  DS4_MMA_UNROLL
  for (int i = 0; i < 4; ++i)
    acc.v[SLOT][mt][nt][i] = add_term(acc.v[SLOT][mt][nt][i], d[i], f.dw[mt][i >> 1], f.da[nt][i & 1]);
}

template <int S>
__host__ __device__ __forceinline__ void begin_segment(Acc& acc) {
  constexpr int k = seg_slot(S);
  DS4_MMA_UNROLL
  for (int mt = 0; mt < kMT; ++mt) DS4_MMA_UNROLL
  for (int nt = 0; nt < kNT; ++nt) DS4_MMA_UNROLL
  for (int i = 0; i < 4; ++i) acc.v[k][mt][nt][i] = 0.0f;
}

// slot a += slot b for every output.
template <int A, int B>
__host__ __device__ __forceinline__ void fold_slots(Acc& acc) {
  DS4_MMA_UNROLL
  for (int mt = 0; mt < kMT; ++mt) DS4_MMA_UNROLL
  for (int nt = 0; nt < kNT; ++nt) DS4_MMA_UNROLL
  for (int i = 0; i < 4; ++i) acc.v[A][mt][nt][i] = f_add(acc.v[A][mt][nt][i], acc.v[B][mt][nt][i]);
}

// After segment S: l0+l4 (S=1); l2+l6, then (l0+l4)+(l2+l6) (S=3); l1+l5 (S=5); l3+l7, then
// (l1+l5)+(l3+l7), then the total (S=7). The result ends in slot 0.
template <int S>
__host__ __device__ __forceinline__ void end_segment(Acc& acc) {
  if constexpr (S == 1) {
    fold_slots<0, 1>(acc);
  } else if constexpr (S == 3) {
    fold_slots<1, 2>(acc);
    fold_slots<0, 1>(acc);
  } else if constexpr (S == 5) {
    fold_slots<1, 2>(acc);
  } else if constexpr (S == 7) {
    fold_slots<2, 3>(acc);
    fold_slots<1, 2>(acc);
    fold_slots<0, 1>(acc);
  }
}

}  // namespace ds4::cuda::mma
