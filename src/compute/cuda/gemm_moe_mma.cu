// Tensor-core routed experts for many rows (gemm_mma.h mma_moe; on unless DS4_CUDA_MMA=0): the
// (token, slot) pairs grouped by expert on the device (count, one-thread scan, placement), then
// grouped products (gemm_moe_mma.cuh): IQ2_XXS gate and up (blockIdx.z) into gu, the CPU's
// swiglu into h, h quantized to Q8_K (the CPU's bytes), Q2_K down into out, and the slots added
// in slot order. Every value is the CPU's bit for bit (the grouping only decides which block of
// threads computes a pair, never how); an expert id outside [0, n_expert) makes that pair's
// values NaN (the kernels cannot throw).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemm_mma.h"
#include "compute/cuda/gemm_moe_mma.cuh"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {
namespace {

using namespace ds4::cuda::moe_mma;  // (kThreads is written moe_mma::kThreads: gemv_detail has its own)

// d = A * B (C = 0).
__device__ __forceinline__ void mma_s8_zero(int d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}
// d += A * B.
__device__ __forceinline__ void mma_s8_acc(int d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct MoeArgs {
  const uint8_t* w0;  // expert 0 of the matrix (z = 0)
  const uint8_t* w1;  // z = 1 (up), or w0
  size_t expert_stride, row_stride;
  int64_t n_in, n_out, n_expert;
  const int8_t* aqs;  // Q8_K activations, quantize_acts' layout
  const float* ad;
  int64_t a_n;    // values per activation row
  int64_t k;      // slots per token
  bool by_token;  // activation row of pair p: p / k (gate/up) or p (down)
  const int32_t* perm;
  const int32_t* off;
  const int32_t* cnt;
  const int32_t* tile0;
  float* out;  // out[(p * zs + z) * n_out + o]
  int64_t zs;
  const uint64_t* grid;
};

// Superblock sb's raw weight bytes of the tile's rows (staged formats) and its activation pieces
// into stage st by cp.async (act_piece's bytes: padding tokens zero-filled; rows past n_out not
// copied).
template <bool kQ2K>
__device__ __forceinline__ void issue_stage(const MoeArgs& g, const uint8_t* W, int64_t o0, const int* s_pair, int sb,
                                            uint8_t* st) {
  using G = Geo<kQ2K>;
  const uint32_t base = smem_addr(st);
  if constexpr (G::kStaged) {
    constexpr int kChunks = G::kStaged ? G::kRawChunks : 1;  // (no division by zero when unstaged)
    for (int i = threadIdx.x; i < kBM * kChunks; i += moe_mma::kThreads) {
      const int row = i / kChunks, w = i - row * kChunks;
      const int64_t o = o0 + row;
      if (o >= g.n_out) continue;
      const uint8_t* blk = W + static_cast<size_t>(o) * g.row_stride + static_cast<size_t>(sb) * G::kSbBytes;
      const int lead = raw_lead(blk);
      cp_async16_n(base + static_cast<uint32_t>(G::kRawWOff + row * G::kRawPitch + 16 * w), blk - lead + 16 * w,
                   raw_piece_bytes<kQ2K>(lead, w));
    }
  }
#pragma unroll
  for (int u = 0; u < G::kItemsA / moe_mma::kThreads; ++u) {
    const int i = threadIdx.x + moe_mma::kThreads * u, tok = i / 16, part = i % 16;
    const int p = s_pair[tok];
    const int64_t arow = p < 0 ? 0 : (g.by_token ? p / g.k : p);
    cp_async16_zfill(base + static_cast<uint32_t>(G::kAOff + tok * kPitch + 16 * part),
                     g.aqs + arow * g.a_n + 256 * static_cast<int64_t>(sb) + 16 * part, p >= 0);
    if (part == 0)
      cp_async4_zfill(base + static_cast<uint32_t>(G::kAdOff + 4 * tok), g.ad + arow * (g.a_n / 256) + sb, p >= 0);
  }
}

// Superblock sb decoded into dec from stage st's raw copy (unstaged: from global memory).
// kSerial: the weight items one after the other (fewer live registers for the Q2_K kernel at 2
// blocks per SM).
template <bool kQ2K, bool kSerial>
__device__ __forceinline__ void decode_stage(const MoeArgs& g, const uint8_t* W, int64_t o0, int sb, const uint8_t* st,
                                             uint8_t* dec) {
  using G = Geo<kQ2K>;
#pragma unroll(kSerial ? 1 : G::kItemsW / moe_mma::kThreads)
  for (int u = 0; u < G::kItemsW / moe_mma::kThreads; ++u) {
    const int item = threadIdx.x + moe_mma::kThreads * u, row = item / 8, c = item % 8;
    const int64_t o = o0 + row;
    const uint8_t* blk = nullptr;
    if (o < g.n_out) {
      blk = W + static_cast<size_t>(o) * g.row_stride + static_cast<size_t>(sb) * G::kSbBytes;
      if constexpr (G::kStaged) blk = st + G::kRawWOff + row * G::kRawPitch + raw_lead(blk);
    }
    if constexpr (kQ2K)
      decode_q2k_item(blk, c, dec, row);
    else
      decode_iq2_item(blk, c, g.grid, dec, row);
  }
}

// One superblock (decoded weights dec, activations of stage st): its integer sums, then its
// term into slot SLOT.
template <bool kQ2K, int SLOT>
__device__ __forceinline__ void superblock(FAcc<kQ2K>& f, const uint8_t* dec, const uint8_t* st, int lane, int warp) {
  constexpr int kNT = Geo<kQ2K>::kNT;
  IAcc<kQ2K> ia;
  clear(ia);
  Ls ls;
  if constexpr (!kQ2K) load_ls(dec, lane, warp, ls);
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    Frags<kQ2K> fr;
    load_frags(dec, st, lane, warp, ks, fr);
    if constexpr (kQ2K) {
      uint32_t am[kMT][4];
      load_min_frags(dec, lane, warp, ks, am);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mma_s8_acc(ia.v[mt][nt], fr.a[mt], fr.b[nt]);
          mma_s8_acc(ia.m[mt][nt], am[mt], fr.b[nt]);
        }
    } else {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          int d[4];
          mma_s8_zero(d, fr.a[mt], fr.b[nt]);
          iq2_group(ia, ls, ks, mt, nt, d);
        }
    }
  }
  if constexpr (kQ2K)
    q2k_term<SLOT>(f, ia, dec, st, lane, warp);
  else
    iq2_term(f, ia, dec, st, lane, warp);
}

struct Loop {
  uint8_t* smem;  // decoded weights, then two raw stages
  const uint8_t* W;
  int64_t o0;
  const int* s_pair;
  int nsb, idx, lane, warp;
};

// The superblock at visiting position L.idx: wait for its stage (issued one step earlier; the
// barrier also ends the previous superblock's reads of dec and of the other stage), issue the
// next one's copies into that other stage, decode, compute.
template <bool kQ2K, bool kSerial, int SLOT>
__device__ __forceinline__ void step(FAcc<kQ2K>& f, const MoeArgs& g, Loop& L) {
  using G = Geo<kQ2K>;
  uint8_t* dec = L.smem;
  uint8_t* st = L.smem + G::kDecBytes + (L.idx & 1) * G::kStageBytes;
  cp_async_wait_all();
  __syncthreads();
  if (L.idx + 1 < L.nsb)
    issue_stage<kQ2K>(g, L.W, L.o0, L.s_pair, sb_at(kQ2K, L.nsb, L.idx + 1),
                      L.smem + G::kDecBytes + ((L.idx + 1) & 1) * G::kStageBytes);
  cp_async_commit();
  decode_stage<kQ2K, kSerial>(g, L.W, L.o0, sb_at(kQ2K, L.nsb, L.idx), st, dec);
  __syncthreads();
  superblock<kQ2K, SLOT>(f, dec, st, L.lane, L.warp);
  ++L.idx;
}

template <bool kSerial, int S>
__device__ __forceinline__ void q2k_segment(FAcc<true>& f, const MoeArgs& g, Loop& L) {
  clear_slot<seg_slot(S)>(f);
  const int n = seg_count_sb(L.nsb, S);
  for (int j = 0; j < n; ++j) step<true, kSerial, seg_slot(S)>(f, g, L);
  end_segment<S>(f);
}

// blockIdx.x: 128 rows; blockIdx.y: tile of the expert-grouped pairs; blockIdx.z: matrix.
template <bool kQ2K, int kMinBlocks>
__global__ void __launch_bounds__(moe_mma::kThreads, kMinBlocks) k_moe_mma(MoeArgs g) {
  using G = Geo<kQ2K>;
  constexpr int kBN = G::kBN, kNT = G::kNT;
  constexpr bool kSerial = kQ2K && kMinBlocks == 2;
  pdl_begin();
  extern __shared__ uint4 smem4[];
  __shared__ int s_pair[kBN];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const int e = tile_expert(g.tile0, static_cast<int>(g.n_expert), static_cast<int>(blockIdx.y));
  if (e < 0) return;  // past the last tile (uniform over the block)
  const int j0 = (static_cast<int>(blockIdx.y) - g.tile0[e]) * kBN;
  const int ntok = g.cnt[e] - j0 < kBN ? g.cnt[e] - j0 : kBN;
  if (threadIdx.x < kBN)
    s_pair[threadIdx.x] = static_cast<int>(threadIdx.x) < ntok ? g.perm[g.off[e] + j0 + threadIdx.x] : -1;
  __syncthreads();
  Loop L;
  L.smem = smem;
  L.W = (blockIdx.z ? g.w1 : g.w0) + static_cast<size_t>(e) * g.expert_stride;
  L.o0 = static_cast<int64_t>(blockIdx.x) * kBM;
  L.s_pair = s_pair;
  L.nsb = static_cast<int>(g.n_in / 256);
  L.idx = 0;
  L.lane = threadIdx.x & 31;
  L.warp = threadIdx.x >> 5;
  issue_stage<kQ2K>(g, L.W, L.o0, s_pair, sb_at(kQ2K, L.nsb, 0), smem + Geo<kQ2K>::kDecBytes);
  cp_async_commit();
  FAcc<kQ2K> f;
  if constexpr (kQ2K) {
    q2k_segment<kSerial, 0>(f, g, L);
    q2k_segment<kSerial, 1>(f, g, L);
    q2k_segment<kSerial, 2>(f, g, L);
    q2k_segment<kSerial, 3>(f, g, L);
    q2k_segment<kSerial, 4>(f, g, L);
    q2k_segment<kSerial, 5>(f, g, L);
    q2k_segment<kSerial, 6>(f, g, L);
    q2k_segment<kSerial, 7>(f, g, L);
  } else {
    clear_slot<0>(f);
    for (int j = 0; j < L.nsb; ++j) step<false, false, 0>(f, g, L);
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t o = L.o0 + elem_row(L.lane, L.warp, mt, i);
        const int col = elem_col<kQ2K>(L.lane, L.warp, nt, i);
        if (o < g.n_out && col < ntok) {
          float v = f.v[0][mt][nt][i];
          if constexpr (!kQ2K) v = __fmul_rn(0.125f, v);
          g.out[(static_cast<int64_t>(s_pair[col]) * g.zs + blockIdx.z) * g.n_out + o] = v;
        }
      }
}

// ---- routing ---------------------------------------------------------------------------------

__global__ void k_route_count(const int32_t* experts, int64_t pairs, int64_t n_expert, int32_t* cnt) {
  pdl_begin();
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int32_t e = experts[p];
  if (e >= 0 && e < n_expert) atomicAdd(cnt + e, 1);
}
// off / tile0_gu / tile0_dn: exclusive prefix sums of cnt and of ceil(cnt / kBN) for the gate/up
// and the down tiles (n_expert + 1 entries each); cursor cleared. One thread: n_expert is small.
__global__ void k_route_scan(const int32_t* cnt, int64_t n_expert, int32_t* off, int32_t* tile0_gu,
                             int32_t* tile0_dn, int32_t* cursor) {
  constexpr int kGu = Geo<false>::kBN, kDn = Geo<true>::kBN;
  pdl_begin();
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t a = 0, t = 0, u = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    off[e] = a, tile0_gu[e] = t, tile0_dn[e] = u, cursor[e] = 0;
    a += cnt[e];
    t += (cnt[e] + kGu - 1) / kGu;
    u += (cnt[e] + kDn - 1) / kDn;
  }
  off[n_expert] = a, tile0_gu[n_expert] = t, tile0_dn[n_expert] = u;
}
__global__ void k_route_place(const int32_t* experts, int64_t pairs, int64_t n_expert, const int32_t* off,
                              int32_t* cursor, int32_t* perm) {
  pdl_begin();
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int32_t e = experts[p];
  if (e >= 0 && e < n_expert) perm[off[e] + atomicAdd(cursor + e, 1)] = static_cast<int32_t>(p);
}
// Rows of pairs with a bad expert id: NaN (blockIdx.x = pair).
__global__ void k_nan_bad_pairs(const int32_t* experts, int64_t n_expert, float* out, int64_t row_len) {
  pdl_begin();
  const int64_t p = blockIdx.x;
  const int32_t e = experts[p];
  if (e >= 0 && e < n_expert) return;
  for (int64_t i = threadIdx.x; i < row_len; i += blockDim.x) out[p * row_len + i] = __int_as_float(0x7fc00000);
}

// h[p][o] = swiglu(g, u, limit) * weight[p] (swiglu_cpu: the CPU's operations).
__global__ void k_mma_swiglu(const float* gu, const float* weights, int64_t pairs, int64_t n_ff, float limit,
                             float* h) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs * n_ff) return;
  const int64_t p = i / n_ff, o = i % n_ff;
  h[i] = swiglu_cpu(gu[(p * 2) * n_ff + o], gu[(p * 2 + 1) * n_ff + o], limit, weights[p]);
}

// y[t][o] = 0 + out[t*k][o] + ... in slot order.
__global__ void k_mma_slot_sum(const float* out, int64_t rows, int64_t k, int64_t n_embd, float* y) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n_embd) return;
  const int64_t t = i / n_embd, o = i % n_embd;
  float acc = 0.0f;
  for (int64_t s = 0; s < k; ++s) acc = __fadd_rn(acc, out[(t * k + s) * n_embd + o]);
  y[i] = acc;
}

// Blocks per SM the kernel is compiled for: 2 (128 registers). The down kernel's 4 partial slots
// then spill ~100 bytes to local memory, and still it is faster than at 1 block per SM with ~200
// registers (H200, 8 layers at 2K: 11,180 against 9,934 t/s); DS4_CUDA_MOE_DN2=0 gives that one.
template <bool kQ2K>
void launch_moe_mma(const MoeArgs& g, int64_t pairs, int64_t nz, cudaStream_t s, const char* what) {
  static const bool two = !kQ2K || env_switch("DS4_CUDA_MOE_DN2", true);
  static const bool smem_ok = [] {
    if constexpr (kQ2K) allow_smem(reinterpret_cast<const void*>(k_moe_mma<kQ2K, 1>), Geo<kQ2K>::kSmemBytes, "mma moe");
    allow_smem(reinterpret_cast<const void*>(k_moe_mma<kQ2K, 2>), Geo<kQ2K>::kSmemBytes, "mma moe");
    return true;
  }();
  (void)smem_ok;
  constexpr int kBN = Geo<kQ2K>::kBN;
  const int64_t gx = (g.n_out + kBM - 1) / kBM, gy = (pairs + kBN - 1) / kBN + g.n_expert;
  if (gy > 65535 || gx > INT_MAX) fail("CUDA {}: {} pairs x {} experts is too many tiles", what, pairs, g.n_expert);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(nz));
  if constexpr (kQ2K) {
    if (!two) {
      launch(k_moe_mma<kQ2K, 1>, grid, moe_mma::kThreads, Geo<kQ2K>::kSmemBytes, s, g);
      check_launch(what);
      return;
    }
  }
  launch(k_moe_mma<kQ2K, 2>, grid, moe_mma::kThreads, Geo<kQ2K>::kSmemBytes, s, g);
  check_launch(what);
}

}  // namespace

bool mma_moe_applies(const DevExperts& gate, const DevExperts& up, const DevExperts& down, int64_t rows, int64_t k) {
  if (!mma_enabled() || rows * k < kMmaMinPairs) return false;
  if (gate.first.type != GgmlType::IQ2_XXS || up.first.type != GgmlType::IQ2_XXS || down.first.type != GgmlType::Q2_K)
    return false;
  const int64_t n_embd = gate.first.n_in, n_ff = gate.first.n_out;
  return n_embd % 256 == 0 && n_ff % 256 == 0 && gate.n_expert > 0 && gate.n_expert <= 65535 - 1 &&
         rows * k < INT_MAX / 2 && down.first.row_stride % 4 == 0 && down.expert_stride % 4 == 0 &&
         // issue_stage copies from the 16-byte boundary at or below each superblock: never below
         // the tensor's first byte when that is 16-byte aligned
         reinterpret_cast<uintptr_t>(down.first.data) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(gate.first.data) % 16 == 0 && reinterpret_cast<uintptr_t>(up.first.data) % 16 == 0;
}

void mma_moe(const DevExperts& gate, const DevExperts& up, const DevExperts& down, const float* x,
             const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit, float* y,
             cudaStream_t stream) {
  const int64_t n_embd = gate.first.n_in, n_ff = gate.first.n_out, pairs = rows * k, ne = gate.n_expert;
  if (pairs <= 0) return;
  const uint64_t* grid = reinterpret_cast<const uint64_t*>(iq2_grid_address());

  // Routing: cnt | off | tile0_gu | tile0_dn | cursor | perm.
  Scratch rbuf(static_cast<size_t>(5 * (ne + 1) + pairs) * sizeof(int32_t), stream);
  int32_t* cnt = static_cast<int32_t*>(rbuf.get());
  int32_t* off = cnt + (ne + 1);
  int32_t* tile0_gu = off + (ne + 1);
  int32_t* tile0_dn = tile0_gu + (ne + 1);
  int32_t* cursor = tile0_dn + (ne + 1);
  int32_t* perm = cursor + (ne + 1);
  check(cudaMemsetAsync(cnt, 0, static_cast<size_t>(ne + 1) * sizeof(int32_t), stream), "cudaMemsetAsync (mma moe)");
  launch(k_route_count, grid_for(pairs, 256), 256, 0, stream, experts, pairs, ne, cnt);
  check_launch("mma moe route count");
  launch(k_route_scan, 1, 32, 0, stream, cnt, ne, off, tile0_gu, tile0_dn, cursor);
  check_launch("mma moe route scan");
  launch(k_route_place, grid_for(pairs, 256), 256, 0, stream, experts, pairs, ne, off, cursor, perm);
  check_launch("mma moe route place");

  Scratch hbuf(static_cast<size_t>(pairs) * static_cast<size_t>(n_ff) * sizeof(float), stream);
  float* h = static_cast<float*>(hbuf.get());
  {
    Scratch xq(act_bytes(GgmlType::Q8_K, rows, n_embd), stream);
    const ActQ aq = quantize_acts(GgmlType::Q8_K, x, rows, n_embd, n_embd, xq.get(), stream);
    Scratch gub(static_cast<size_t>(pairs) * 2 * static_cast<size_t>(n_ff) * sizeof(float), stream);
    float* gu = static_cast<float*>(gub.get());
    MoeArgs g{};
    g.w0 = gate.first.data, g.w1 = up.first.data;
    if (gate.expert_stride != up.expert_stride || gate.first.row_stride != up.first.row_stride)
      fail("CUDA mma moe: gate and up strides differ ({} / {}, {} / {})", gate.expert_stride, up.expert_stride,
           gate.first.row_stride, up.first.row_stride);
    g.expert_stride = gate.expert_stride, g.row_stride = gate.first.row_stride;
    g.n_in = n_embd, g.n_out = n_ff, g.n_expert = ne;
    g.aqs = aq.qs, g.ad = aq.d, g.a_n = n_embd, g.k = k, g.by_token = true;
    g.perm = perm, g.off = off, g.cnt = cnt, g.tile0 = tile0_gu;
    g.out = gu, g.zs = 2, g.grid = grid;
    launch_moe_mma<false>(g, pairs, 2, stream, "mma moe gate/up (iq2_xxs, tensor cores)");
    launch(k_nan_bad_pairs, static_cast<unsigned>(pairs), 256, 0, stream, experts, ne, gu, 2 * n_ff);
    check_launch("mma moe bad ids (gate/up)");
    launch(k_mma_swiglu, grid_for(pairs * n_ff, 256), 256, 0, stream, gu, weights, pairs, n_ff, limit, h);
    check_launch("mma moe swiglu");
  }
  Scratch hq(act_bytes(GgmlType::Q8_K, pairs, n_ff), stream);
  const ActQ haq = quantize_acts(GgmlType::Q8_K, h, pairs, n_ff, n_ff, hq.get(), stream);
  Scratch obuf(static_cast<size_t>(pairs) * static_cast<size_t>(n_embd) * sizeof(float), stream);
  float* out = static_cast<float*>(obuf.get());
  MoeArgs g{};
  g.w0 = down.first.data, g.w1 = down.first.data;
  g.expert_stride = down.expert_stride, g.row_stride = down.first.row_stride;
  g.n_in = n_ff, g.n_out = n_embd, g.n_expert = ne;
  g.aqs = haq.qs, g.ad = haq.d, g.a_n = n_ff, g.k = k, g.by_token = false;
  g.perm = perm, g.off = off, g.cnt = cnt, g.tile0 = tile0_dn;
  g.out = out, g.zs = 1, g.grid = grid;
  launch_moe_mma<true>(g, pairs, 1, stream, "mma moe down (q2_k, tensor cores)");
  launch(k_nan_bad_pairs, static_cast<unsigned>(pairs), 256, 0, stream, experts, ne, out, n_embd);
  check_launch("mma moe bad ids (down)");
  launch(k_mma_slot_sum, grid_for(rows * n_embd, 256), 256, 0, stream, out, rows, k, n_embd, y);
  check_launch("mma moe slot sum");
}

}  // namespace ds4::cuda::gemv_detail
