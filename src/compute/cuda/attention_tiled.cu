// Register-tiled attention kernels for a chunk of queries (attention_tiled.h), in the CPU's order.
// Explicit intrinsics throughout: the sums must not be contracted.
#include "compute/cuda/attention_tiled.h"

#include <cstdint>
#include <type_traits>

#include "compute/cuda/attn_rows.cuh"
#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_internal.h"

namespace ds4::cuda {

namespace {

// ---- scores -------------------------------------------------------------------------------------
// Warp = 4 heads x 8 rows (32 dots). Lane L owns chain L of each dot (elements e with e % 32 ==
// L, in element order: the CPU's AVX2 float dot) and holds its heads' q elements in registers, so
// each row element it loads serves 4 FMAs. The 32 dots' chains are then folded by a reduce-
// scatter over the lanes: at offset o each lane keeps half of its dots and adds its partner's
// (lane ^ o) chains of them. Offsets 8, 16, 4, 2, 1 in that order give exactly the CPU's tree,
// (c_l + c_{l+8}) + (c_{l+16} + c_{l+24}) and then ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), since
// each step adds the same two partial sums as the CPU (a + b == b + a bit for bit). 31 shuffles
// fold 32 dots, where one dot at a time takes 12.
constexpr int kSHeads = 4, kSRows = 8, kSWarps = 8, kSTile = 128;  // kSTile: rows per block
static_assert(kSHeads * kSRows == 32, "one dot per lane after the fold");

template <int N, int O>
__device__ __forceinline__ void fold_step(float* v, int lane) {
  const bool upper = (lane & O) != 0;
#pragma unroll
  for (int j = 0; j < N / 2; ++j) {
    const float send = upper ? v[j] : v[j + N / 2];
    const float keep = upper ? v[j + N / 2] : v[j];
    v[j] = __fadd_rn(keep, __shfl_xor_sync(kFull, send, O));
  }
}

// The dot lane L holds after the fold: the halves it kept, first step's choice most significant.
__device__ __forceinline__ int folded_dot(int lane) {
  return ((lane >> 3) & 1) * 16 + ((lane >> 4) & 1) * 8 + ((lane >> 2) & 1) * 4 + ((lane >> 1) & 1) * 2 + (lane & 1);
}

// The 8 warps of a block (32 heads of one query) read the same rows: each group of 8 rows is
// staged once in shared memory (cp.async, two groups deep) instead of loaded by every warp.
// WARPS x 4 heads and TILE rows per block: 8 x 128 for a chunk of queries; one query (decode)
// has too few dots to fill the GPU with such blocks (10 for the Flash shape at 640 rows), so it
// takes small tiles of few heads (attn_scores_tiled).
template <int STEPS, int WARPS = kSWarps, int TILE = kSTile>  // STEPS = head_dim / 32
__global__ void __launch_bounds__(32 * WARPS, WARPS >= 16 ? 1 : 2) k_attn_scores_tiled(const float* q, int64_t n_heads, AttnRows kv,
                                                                     float scale, float* S, int* err) {
  pdl_begin();
  constexpr int D = STEPS * 32;
  attn_store_fresh(kv, D);
  constexpr int kGroupFloats = kSRows * D;
  __shared__ __align__(16) float rows_s[2][kGroupFloats];
  __shared__ const float* rows_p[TILE];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h0 = (static_cast<int64_t>(blockIdx.y) * WARPS + warp) * kSHeads;
  const bool live = h0 < n_heads;  // idle warps still stage rows and meet the barriers
  const AttnSpan sp = attn_span(kv);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * TILE;
  if (t0 >= sp.total) return;  // the whole block
  const int64_t t1 = t0 + TILE < sp.total ? t0 + TILE : sp.total;
  const int n_rows = static_cast<int>(t1 - t0), n_groups = (n_rows + kSRows - 1) / kSRows;
  for (int i = threadIdx.x; i < n_rows; i += blockDim.x) rows_p[i] = attn_row(kv, sp, t0 + i, D, err);
  const int64_t z = blockIdx.z;
  const float* qz = q + (z * n_heads + h0) * D;
  float qr[kSHeads][STEPS];
#pragma unroll
  for (int h = 0; h < kSHeads; ++h)
#pragma unroll
    for (int t = 0; t < STEPS; ++t) qr[h][t] = h0 + h < n_heads ? __ldg(qz + h * D + 32 * t + lane) : 0.0f;
  S += (z * n_heads + h0) * kv.max_rows;
  const int mine = folded_dot(lane), mh = mine / kSRows, mj = mine % kSRows;
  __syncthreads();  // rows_p
  // Group g's rows into buffer b: missing rows (past the tile, bad index) as zeros.
  auto stage = [&](int g, int b) {
    float* dst = rows_s[b];
    for (int c = threadIdx.x; c < kGroupFloats / 4; c += blockDim.x) {
      const int j = c / (D / 4), e = (c % (D / 4)) * 4, r = g * kSRows + j;
      const float* src = r < n_rows ? rows_p[r] : nullptr;
      float* d = dst + j * D + e;
      if (!src) {
        d[0] = d[1] = d[2] = d[3] = 0.0f;
      } else if ((reinterpret_cast<uintptr_t>(src + e) & 15) == 0) {
        cp_async16(smem_addr(d), src + e);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) cp_async4(smem_addr(d + u), src + e + u);
      }
    }
    cp_async_commit();
  };
  stage(0, 0);
  for (int g = 0; g < n_groups; ++g) {
    const int b = g & 1;
    if (g + 1 < n_groups) {
      stage(g + 1, b ^ 1);  // b ^ 1 was last read before the previous iteration's final barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (live) {
      const float* rs = rows_s[b];
      float acc[kSHeads * kSRows];
#pragma unroll
      for (int i = 0; i < kSHeads * kSRows; ++i) acc[i] = 0.0f;
#pragma unroll
      for (int t = 0; t < STEPS; ++t) {
        float rv[kSRows];
#pragma unroll
        for (int j = 0; j < kSRows; ++j) rv[j] = rs[j * D + 32 * t + lane];
#pragma unroll
        for (int h = 0; h < kSHeads; ++h)
#pragma unroll
          for (int j = 0; j < kSRows; ++j) acc[h * kSRows + j] = fmaf(qr[h][t], rv[j], acc[h * kSRows + j]);
      }
      fold_step<32, 8>(acc, lane);
      fold_step<16, 16>(acc, lane);
      fold_step<8, 4>(acc, lane);
      fold_step<4, 2>(acc, lane);
      fold_step<2, 1>(acc, lane);
      const int r = g * kSRows + mj;
      if (r < n_rows && h0 + mh < n_heads)
        S[mh * kv.max_rows + t0 + r] = rows_p[r] ? __fmul_rn(acc[0], scale) : __int_as_float(0x7fc00000);
    }
    __syncthreads();  // buffer b is consumed
  }
}

// ---- weighted rows --------------------------------------------------------------------------------
// Thread = kODims adjacent dims of kOHeads heads: each row element it loads serves kOHeads
// products; the weights of a stage of rows sit in shared memory as [row][head] (a row's 16
// weights: four broadcast float4 loads, shared by the thread's dims). o = fma(e_r, v_r, o) from 0
// in row order, times inv, as the CPU (quant::fma_f32_rows). kOHeads is 16 for a chunk of
// queries; one query takes 4 (4x the blocks: 16 gave 16 blocks in all for the Flash shape, too
// few to hide the rows' loads). Chunks take kODims = 2 (DS4_CUDA_ATTN_OUT2=0: 1), which halves the
// shared loads per product (the one-dim kernel measured issue-bound: 0.78 issued per scheduler);
// 8K prefill on 34 layers, H100, same call: 2,939 -> 3,033 t/s (docs/BENCHMARKS.md session 28).
constexpr int kOThreads = 128, kOStage = 256, kOAhead = 8;

template <int kODims>
__device__ __forceinline__ void load_dims(const float* row, int64_t d, float (&v)[kODims]) {
  if constexpr (kODims == 1) {
    v[0] = row ? __ldg(row + d) : 0.0f;
  } else {
    static_assert(kODims == 2, "one or two dims per thread");
    if (!row) {
      v[0] = v[1] = 0.0f;
    } else if ((reinterpret_cast<uintptr_t>(row + d) & 7) == 0) {
      const float2 x = __ldg(reinterpret_cast<const float2*>(row + d));
      v[0] = x.x;
      v[1] = x.y;
    } else {
      v[0] = __ldg(row + d);
      v[1] = __ldg(row + d + 1);
    }
  }
}

template <int kOHeads, int kODims = 1>
__global__ void __launch_bounds__(kOThreads) k_attn_out_tiled(const float* E, const float* inv, int64_t n_heads,
                                                              int64_t head_dim, AttnRows kv, float* out, int* err) {
  constexpr int kOPitch = kOHeads + 4;
  pdl_begin();
  __shared__ const float* rows_sh[kOStage];
  __shared__ __align__(16) float e_sh[kOStage * kOPitch];
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kOHeads;
  // head_dim is even wherever two dims per thread are launched (attn_out_tiled).
  const int64_t d = (static_cast<int64_t>(blockIdx.x) * kOThreads + threadIdx.x) * kODims;
  const int64_t dd = d < head_dim ? d : 0;
  const AttnSpan sp = attn_span(kv);
  const int64_t total = sp.total, z = blockIdx.z;
  E += (z * n_heads + h0) * kv.max_rows;
  const int nh = static_cast<int>(n_heads - h0 < kOHeads ? n_heads - h0 : kOHeads);
  float acc[kODims][kOHeads];
#pragma unroll
  for (int c = 0; c < kODims; ++c)
#pragma unroll
    for (int k = 0; k < kOHeads; ++k) acc[c][k] = 0.0f;
  for (int64_t r0 = 0; r0 < total; r0 += kOStage) {
    const int n = static_cast<int>(total - r0 < kOStage ? total - r0 : kOStage);
    __syncthreads();  // the previous stage is consumed
    for (int i = threadIdx.x; i < n; i += kOThreads) rows_sh[i] = attn_row(kv, sp, r0 + i, head_dim, err);
    for (int i = threadIdx.x; i < kOHeads * n; i += kOThreads) {
      const int k = i / n, j = i - k * n;
      e_sh[j * kOPitch + k] = k < nh ? E[k * kv.max_rows + r0 + j] : 0.0f;
    }
    __syncthreads();
    for (int j0 = 0; j0 < n; j0 += kOAhead) {
      float v[kOAhead][kODims];
#pragma unroll
      for (int u = 0; u < kOAhead; ++u) load_dims<kODims>(j0 + u < n ? rows_sh[j0 + u] : nullptr, dd, v[u]);
#pragma unroll
      for (int u = 0; u < kOAhead; ++u) {
        if (j0 + u < n) {  // rows past the stage hold stale weights
          const float4* e4 = reinterpret_cast<const float4*>(e_sh + (j0 + u) * kOPitch);
#pragma unroll
          for (int c = 0; c < kOHeads / 4; ++c) {
            const float4 e = e4[c];
#pragma unroll
            for (int x = 0; x < kODims; ++x) {
              acc[x][4 * c + 0] = __fmaf_rn(e.x, v[u][x], acc[x][4 * c + 0]);
              acc[x][4 * c + 1] = __fmaf_rn(e.y, v[u][x], acc[x][4 * c + 1]);
              acc[x][4 * c + 2] = __fmaf_rn(e.z, v[u][x], acc[x][4 * c + 2]);
              acc[x][4 * c + 3] = __fmaf_rn(e.w, v[u][x], acc[x][4 * c + 3]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int x = 0; x < kODims; ++x) {
    if (d + x >= head_dim) return;
#pragma unroll
    for (int k = 0; k < kOHeads; ++k)
      if (k < nh) out[(z * n_heads + h0 + k) * head_dim + d + x] = __fmul_rn(acc[x][k], inv[z * n_heads + h0 + k]);
  }
}


// ---- softmax and weighted rows of one query, fused --------------------------------------------------
// Block = kFHeads heads x kFDims dims; thread = one dim of kFHpt heads (warp w: heads 2w, 2w+1).
// The block first takes its heads' maxima (m = max(sink, s_k), the softmax kernel's reduction),
// then walks the rows in stages of kFStage, kBuf deep (below): thread t copies row t's kFDims
// floats into shared memory with cp.async (so a stage's loads are all in flight at once) and
// writes e = exp(s - m) for its row and the block's heads. Each thread then runs, in row order,
// o = fma(e_r, v_r, o) from 0 and den = exp(sink - m) + e_0 + e_1 + ..., and stores
// o * (1 / den): the softmax kernel's and k_attn_out's operations bit for bit, without the
// launch between them or k_attn_out's chains of dependent global loads (128 blocks of 8 warps
// each walking 640 rows from L2 took 23 us for the Flash shape).
constexpr int kFHeads = 8, kFDims = 32, kFHpt = 2, kFThreads = kFHeads * kFDims / kFHpt, kFStage = kFThreads;
static_assert(kFHpt == 2 && kFThreads / 32 * kFHpt == kFHeads, "warp w owns heads 2w and 2w+1");

// kBuf stages in flight (DS4_CUDA_ATTN1_BUFS: 4, the default since measured, 80 KB of dynamic
// shared memory, so the 640 rows of the Flash shape at 2K are two DRAM round trips, not five;
// or 2): the buffers form a ring, stage c + kBuf - 1 is issued while stage c is summed.
// Measured on the H200: the indexed 640-row attention 36.8 -> 34.2 us in a graph, decode at 2K
// 86.7 / 85.6 -> 88.2 / 88.1 t/s (43 layers, same call).
template <int kBuf>
__global__ void __launch_bounds__(kFThreads) k_attn_softmax_out(const float* S, const float* sinks, int64_t n_heads,
                                                                int64_t head_dim, AttnRows kv, float* out, int* err) {
  pdl_begin();
  extern __shared__ __align__(16) float fsm[];
  auto v_sh = reinterpret_cast<float (*)[kFStage][kFDims]>(fsm);                          // [kBuf]
  auto e_sh = reinterpret_cast<float (*)[kFStage][kFHeads]>(fsm + kBuf * kFStage * kFDims);  // [kBuf]
  __shared__ float m_sh[kFHeads];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kFHeads, d0 = static_cast<int64_t>(blockIdx.x) * kFDims;
  const int64_t z = blockIdx.z;
  const AttnSpan sp = attn_span(kv);
  const int64_t total = sp.total;
  S += (z * n_heads + h0) * kv.max_rows;
  const int nh = static_cast<int>(n_heads - h0 < kFHeads ? n_heads - h0 : kFHeads);
  // Maxima: warp w reduces heads 2w and 2w+1 (a missing head: 0, never used).
#pragma unroll
  for (int k = 0; k < kFHpt; ++k) {
    const int hl = warp * kFHpt + k;
    if (hl >= nh) {
      if (lane == 0) m_sh[hl] = 0.0f;
      continue;
    }
    const float* s = S + hl * kv.max_rows;
    float m = sinks[h0 + hl];
    for (int64_t r = lane; r < total; r += 32) m = std_max(m, s[r]);
    for (int o = 16; o > 0; o >>= 1) m = std_max(m, __shfl_xor_sync(kFull, m, o));
    if (lane == 0) m_sh[hl] = m;
  }
  __syncthreads();
  float mh[kFHeads];
#pragma unroll
  for (int k = 0; k < kFHeads; ++k) mh[k] = m_sh[k];
  // Rows r0 .. r0 + kFStage into buffer b: the rows' kFDims floats as 16-byte pieces, consecutive
  // threads on consecutive pieces (a warp reads 4 rows' 128 bytes); thread t then writes the
  // weights e of row r0 + t for the block's heads.
  auto stage = [&](int64_t r0, int b) {
    constexpr int kPieces = kFDims / 4;
#pragma unroll
    for (int q = 0; q < kPieces; ++q) {
      const int p = static_cast<int>(threadIdx.x) + kFThreads * q, i = p / kPieces, c = (p % kPieces) * 4;
      const int64_t r = r0 + i;
      if (r >= total) continue;
      const float* row = attn_row(kv, sp, r, head_dim, err);
      float* vd = &v_sh[b][i][c];
      const int64_t d = d0 + c;
      if (row && d + 4 <= head_dim && (reinterpret_cast<uintptr_t>(row + d) & 15) == 0) {
        cp_async16(smem_addr(vd), row + d);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) vd[u] = row && d + u < head_dim ? row[d + u] : 0.0f;
      }
    }
    const int64_t r = r0 + threadIdx.x;
    if (r < total) {
#pragma unroll
      for (int k = 0; k < kFHeads; ++k)
        e_sh[b][threadIdx.x][k] = k < nh ? expf_ref(__fsub_rn(S[k * kv.max_rows + r], mh[k])) : 0.0f;
    }
    cp_async_commit();
  };
  const int k0 = warp * kFHpt;
  float acc0 = 0.0f, acc1 = 0.0f;
  float den0 = k0 < nh ? expf_ref(__fsub_rn(sinks[h0 + k0], m_sh[k0])) : 0.0f;
  float den1 = k0 + 1 < nh ? expf_ref(__fsub_rn(sinks[h0 + k0 + 1], m_sh[k0 + 1])) : 0.0f;
  // Stages 0 .. kBuf - 2 first; then iteration c issues stage c + kBuf - 1 (an empty group past
  // the end, so that "all but the newest kBuf - 1 groups done" always means stage c is in).
  for (int q = 0; q < kBuf - 1; ++q) {
    if (q * kFStage < total)
      stage(q * kFStage, q);
    else
      cp_async_commit();
  }
  for (int64_t r0 = 0, c = 0; r0 < total; r0 += kFStage, ++c) {
    const int b = static_cast<int>(c % kBuf);
    const int64_t rn = r0 + (kBuf - 1) * static_cast<int64_t>(kFStage);
    if (rn < total)
      stage(rn, static_cast<int>((c + kBuf - 1) % kBuf));  // last read before the previous iteration's final barrier
    else
      cp_async_commit();
    cp_async_wait<kBuf - 1>();
    __syncthreads();
    const int n = static_cast<int>(total - r0 < kFStage ? total - r0 : kFStage);
#pragma unroll 8
    for (int i = 0; i < n; ++i) {
      const float v = v_sh[b][i][lane];
      const float2 e = *reinterpret_cast<const float2*>(&e_sh[b][i][k0]);
      acc0 = __fmaf_rn(e.x, v, acc0);
      acc1 = __fmaf_rn(e.y, v, acc1);
      den0 = __fadd_rn(den0, e.x);
      den1 = __fadd_rn(den1, e.y);
    }
    __syncthreads();  // buffer b is consumed
  }
  const int64_t d = d0 + lane;
  if (d >= head_dim) return;
  if (k0 < nh) out[(z * n_heads + h0 + k0) * head_dim + d] = __fmul_rn(acc0, __fdiv_rn(1.0f, den0));
  if (k0 + 1 < nh) out[(z * n_heads + h0 + k0 + 1) * head_dim + d] = __fmul_rn(acc1, __fdiv_rn(1.0f, den1));
}
}  // namespace

int attn_decode_scores();  // below

bool attn_tiled_applies(int64_t head_dim, int64_t n_queries, int part) {
  static const bool on = env_switch("DS4_CUDA_ATTN_TILED", true);
  // One query (decode): DS4_CUDA_ATTN_TILED1 = 1 scores, 2 weighted rows, 3 both (A/B).
  static const int one = static_cast<int>(env_int("DS4_CUDA_ATTN_TILED1", 0, 0, 3));
  const bool steps_ok = head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512;
  const bool one_on = (one & part) != 0 || (part == 1 && attn_decode_scores() != 0);
  return on && steps_ok && (n_queries > 1 || one_on);
}

namespace {

template <int WARPS, int TILE>
void launch_scores(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, float scale, float* S,
                   int* err, unsigned n_queries, cudaStream_t s) {
  const dim3 grid(grid_for(kv.max_rows, TILE), grid_for(n_heads, kSHeads * WARPS), n_queries);
  switch (head_dim) {
    case 64: launch(k_attn_scores_tiled<2, WARPS, TILE>, grid, 32 * WARPS, 0, s, q, n_heads, kv, scale, S, err); break;
    case 128: launch(k_attn_scores_tiled<4, WARPS, TILE>, grid, 32 * WARPS, 0, s, q, n_heads, kv, scale, S, err); break;
    case 256: launch(k_attn_scores_tiled<8, WARPS, TILE>, grid, 32 * WARPS, 0, s, q, n_heads, kv, scale, S, err); break;
    default: launch(k_attn_scores_tiled<16, WARPS, TILE>, grid, 32 * WARPS, 0, s, q, n_heads, kv, scale, S, err); break;
  }
}

}  // namespace

int attn_decode_scores() {
  static const int v = static_cast<int>(env_int("DS4_CUDA_ATTN1_SCORES", 3, 0, 3));
  return v;
}

bool attn_decode_fused() {
  static const bool on = env_switch("DS4_CUDA_ATTN1_FUSED", true);
  return on;
}

void attn_scores_tiled(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, float scale, float* S,
                       int* err, unsigned n_queries, cudaStream_t s) {
  // Chunks: 8 warps (32 heads) per block, or with DS4_CUDA_ATTN_SWARPS=16 all 64 heads of a query
  // in one block of 16 warps, so each query's rows are staged once instead of twice.
  static const int warps = static_cast<int>(env_int("DS4_CUDA_ATTN_SWARPS", kSWarps, kSWarps, 16)) >= 16 ? 16 : kSWarps;
  if (n_queries > 1 && warps == 16) return launch_scores<16, kSTile>(q, n_heads, head_dim, kv, scale, S, err, n_queries, s);
  if (n_queries > 1) return launch_scores<kSWarps, kSTile>(q, n_heads, head_dim, kv, scale, S, err, n_queries, s);
  // One query: 16 heads x 16 rows per block (3, the default: the fastest of the three on the H200,
  // 87.5 against 86.1 t/s at 2K), or 8 heads x 16 rows (1) or 8 heads x 8 rows (2), to measure.
  switch (attn_decode_scores()) {
    case 2: return launch_scores<2, 8>(q, n_heads, head_dim, kv, scale, S, err, 1, s);
    case 3: return launch_scores<4, 16>(q, n_heads, head_dim, kv, scale, S, err, 1, s);
    default: return launch_scores<2, 16>(q, n_heads, head_dim, kv, scale, S, err, 1, s);
  }
}

void attn_softmax_out(const float* S, const float* sinks, int64_t n_heads, int64_t head_dim, const AttnRows& kv,
                      float* out, int* err, unsigned n_queries, cudaStream_t s) {
  static const int bufs = env_int("DS4_CUDA_ATTN1_BUFS", 4, 2, 4) >= 4 ? 4 : 2;
  const dim3 grid(grid_for(head_dim, kFDims), grid_for(n_heads, kFHeads), n_queries);
  auto run = [&](auto nbuf) {
    constexpr int kBuf = decltype(nbuf)::value;
    const size_t smem = static_cast<size_t>(kBuf) * kFStage * (kFDims + kFHeads) * sizeof(float);
    gemv_detail::allow_smem(reinterpret_cast<const void*>(k_attn_softmax_out<kBuf>), smem, "attention softmax + rows");
    launch(k_attn_softmax_out<kBuf>, grid, kFThreads, smem, s, S, sinks, n_heads, head_dim, kv, out, err);
  };
  if (bufs == 4)
    run(std::integral_constant<int, 4>{});
  else
    run(std::integral_constant<int, 2>{});
}

void attn_out_tiled(const float* E, const float* inv, int64_t n_heads, int64_t head_dim, const AttnRows& kv,
                    float* out, int* err, unsigned n_queries, cudaStream_t s) {
  if (n_queries == 1) {
    const dim3 grid(grid_for(head_dim, kOThreads), grid_for(n_heads, 4), 1);
    launch(k_attn_out_tiled<4>, grid, kOThreads, 0, s, E, inv, n_heads, head_dim, kv, out, err);
  } else if (static const bool two = env_switch("DS4_CUDA_ATTN_OUT2", true); two && head_dim % 2 == 0) {
    const dim3 grid(grid_for(head_dim, 2 * kOThreads), grid_for(n_heads, 16), n_queries);
    launch(k_attn_out_tiled<16, 2>, grid, kOThreads, 0, s, E, inv, n_heads, head_dim, kv, out, err);
  } else {
    const dim3 grid(grid_for(head_dim, kOThreads), grid_for(n_heads, 16), n_queries);
    launch(k_attn_out_tiled<16>, grid, kOThreads, 0, s, E, inv, n_heads, head_dim, kv, out, err);
  }
}

}  // namespace ds4::cuda
