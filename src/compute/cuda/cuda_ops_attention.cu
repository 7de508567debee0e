// Decode attention (one query, all heads, window + compressed/indexed rows, sinks), the CSA
// indexer's scores, top-k selection (CUB radix sort) and the MoE router of the CUDA backend.
// Built with nvcc's default FMA contraction: the attention and indexer kernels use explicit
// intrinsics (their order is the CPU's, bit for bit); moe_route/top_k hold no a*b+c.

#include <algorithm>
#include <cmath>

#include "compute/cuda/attention_tiled.h"
#include "compute/cuda/attn_rows.cuh"
#include "compute/cuda/block_cache.h"
#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_internal.h"
#include "compute/cuda/moe_route.cuh"
#include "core/error.h"

namespace ds4::cuda {

namespace {

// ---- CPU-order float dot -----------------------------------------------------------------------
// quant::vec_dot(F32, w, x, n) as the CPU's AVX2 kernel computes it (dot_avx2_float.cpp): 32 FMA
// chains (element i into chain i % 32) over whole 32-element steps, then 8-element steps into
// chains 0..7, the chains folded as (c_l + c_{l+8}) + (c_{l+16} + c_{l+24}) and then
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the remaining elements added one by one. Lane L
// of a warp owns chain L; every lane returns the result. Explicit intrinsics throughout: this
// file is compiled with FMA contraction on.

__device__ __forceinline__ float warp_dot_cpu(const float* w, const float* x, int64_t n) {
  const int lane = threadIdx.x & 31;
  float a = 0.0f;
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {  // eight steps' loads before their FMAs
    float wv[8], xv[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) wv[u] = w[i + 32 * u + lane], xv[u] = x[i + 32 * u + lane];
#pragma unroll
    for (int u = 0; u < 8; ++u) a = fmaf(wv[u], xv[u], a);
  }
  for (; i + 32 <= n; i += 32) a = fmaf(w[i + lane], x[i + lane], a);
  for (; i + 8 <= n; i += 8)
    if (lane < 8) a = fmaf(w[i + lane], x[i + lane], a);
  float sum = warp_fold_chains(a);
  for (; i < n; ++i) sum = __fadd_rn(sum, __fmul_rn(w[i], x[i]));
  return sum;
}

// ---- attention --------------------------------------------------------------------------------
// The CPU's order (cpu_model_ops.cpp), bit for bit: per head, s_k = dot(q_h, row_k) * scale for
// the rows in visiting order; m = max(sink, s_k); e_k = exp(s_k - m); denominator
// exp(sink - m) + e_0 + e_1 + ... in order; o[i] = (0 + e_0 v_0[i] + e_1 v_1[i] + ...) * (1/den).
// Three kernels: scores (a warp per (head, row)), the softmax sums (a block per head), and the
// weighted rows (a thread per (head, dim), rows in order).

constexpr int kAttnHeads = 8;  // heads per block (one warp each) in the scores kernel
constexpr int kAttnRows = 1;   // rows per block in the scores kernel of one query (one latency each)
// A chunk's queries fill the GPU by themselves: blocks of one row each would be millions of
// tiny blocks (block scheduling, not arithmetic, then bounds the kernel), so each takes more.
// DS4_CUDA_ATTN_ROWS=N (1..256) overrides it, to measure the choice.
int attn_rows_chunk() {
  static const int n = static_cast<int>(env_int("DS4_CUDA_ATTN_ROWS", 16, 1, 256));
  return n;
}

// S[h][r] = dot(q_h, row r) * scale (NaN for a bad index: its row is skipped as the error).
// S has rows of kv.max_rows (the stride); only the first span.total of each are written.
__global__ void k_attn_scores(const float* q, int64_t n_heads, int64_t head_dim, AttnRows kv, float scale, float* S,
                              int* err, int rows_per_block) {
  pdl_begin();
  attn_store_fresh(kv, head_dim);
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kAttnHeads + (threadIdx.x >> 5);
  if (h >= n_heads) return;  // whole warp
  const AttnSpan sp = attn_span(kv);
  const int64_t z = blockIdx.z;
  const float* qh = q + (z * n_heads + h) * head_dim;
  S += z * n_heads * kv.max_rows;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  for (int64_t r = r0; r < r0 + rows_per_block && r < sp.total; ++r) {
    const float* row = attn_row(kv, sp, r, head_dim, err);
    const float v = row ? __fmul_rn(warp_dot_cpu(qh, row, head_dim), scale) : __int_as_float(0x7fc00000);
    if ((threadIdx.x & 31) == 0) S[h * kv.max_rows + r] = v;
  }
}

// One block per head: m, e_k (in place of S), and 1/den; the in-order sum reads e_k from
// shared memory in chunks (a dependent chain: each step must be a shared-memory load).
constexpr int kSoftChunk = 4096;
__global__ void k_attn_softmax(float* S, AttnRows kv, const float* sinks, float* inv) {
  pdl_begin();
  __shared__ float red[32];
  __shared__ float m_sh;
  __shared__ float e_sh[kSoftChunk];
  const int64_t h = blockIdx.x, z = blockIdx.z;
  const int64_t total = attn_span(kv).total;
  float* s = S + (z * gridDim.x + h) * kv.max_rows;
  inv += z * gridDim.x;
  float m = sinks[h];
  for (int64_t r = threadIdx.x; r < total; r += blockDim.x) m = std_max(m, s[r]);
  for (int o = 16; o > 0; o >>= 1) m = std_max(m, __shfl_xor_sync(kFull, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mm = red[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) mm = std_max(mm, red[w]);
    m_sh = mm;
  }
  __syncthreads();
  m = m_sh;
  float den = 0.0f;
  if (threadIdx.x == 0) den = expf_ref(__fsub_rn(sinks[h], m));
  for (int64_t c0 = 0; c0 < total; c0 += kSoftChunk) {
    const int n = static_cast<int>(total - c0 < kSoftChunk ? total - c0 : kSoftChunk);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float e = expf_ref(__fsub_rn(s[c0 + i], m));
      e_sh[i] = e;
      s[c0 + i] = e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll 8
      for (int i = 0; i < n; ++i) den = __fadd_rn(den, e_sh[i]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) inv[h] = __fdiv_rn(1.0f, den);
}

// Thread (head, dim): o = fma(e_r, row_r[dim], o) over the rows in order (quant::fma_f32_rows,
// the CPU's order), times 1/den. The rows'
// addresses and the block's weights are staged in shared memory (up to kOutStage rows at a
// time); each thread then loads 16 rows ahead of its dependent chain of adds.
constexpr int kOutStage = 1024, kOutAhead = 32;
__global__ void __launch_bounds__(32 * kAttnHeads) k_attn_out(const float* E, const float* inv, int64_t n_heads,
                                                              int64_t head_dim, AttnRows kv, float* out, int* err) {
  pdl_begin();
  __shared__ const float* rows_sh[kOutStage];
  __shared__ float e_sh[kAttnHeads][kOutStage];
  const int hl = threadIdx.x >> 5;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kAttnHeads + hl;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * 32 + (threadIdx.x & 31);
  const bool live = h < n_heads && d < head_dim;
  const int64_t dd = d < head_dim ? d : 0;
  const AttnSpan sp = attn_span(kv);
  const int64_t total = sp.total;
  const int64_t z = blockIdx.z;
  E += z * n_heads * kv.max_rows;
  inv += z * n_heads;
  out += z * n_heads * head_dim;
  float acc = 0.0f;
  for (int64_t r0 = 0; r0 < total; r0 += kOutStage) {
    const int n = static_cast<int>(total - r0 < kOutStage ? total - r0 : kOutStage);
    __syncthreads();  // the previous stage is consumed
    for (int i = threadIdx.x; i < n; i += blockDim.x) rows_sh[i] = attn_row(kv, sp, r0 + i, head_dim, err);
    for (int i0 = threadIdx.x; i0 < kAttnHeads * n; i0 += 4 * blockDim.x) {
      float ev[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * blockDim.x, k = i / n, j = i - k * n;
        const int64_t hh = static_cast<int64_t>(blockIdx.y) * kAttnHeads + k;
        ev[u] = i < kAttnHeads * n && hh < n_heads ? E[hh * kv.max_rows + r0 + j] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * blockDim.x, k = i / n, j = i - k * n;
        if (i < kAttnHeads * n) e_sh[k][j] = ev[u];
      }
    }
    __syncthreads();
    float v[kOutAhead];
#pragma unroll
    for (int i = 0; i < kOutAhead; ++i) v[i] = (i < n && rows_sh[i]) ? __ldg(rows_sh[i] + dd) : 0.0f;
    for (int c = 0; c < n; c += kOutAhead) {
      float vn[kOutAhead];
#pragma unroll
      for (int i = 0; i < kOutAhead; ++i) {
        const int j = c + kOutAhead + i;
        vn[i] = (j < n && rows_sh[j]) ? __ldg(rows_sh[j] + dd) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kOutAhead; ++i)
        if (c + i < n) acc = __fmaf_rn(e_sh[hl][c + i], v[i], acc);
#pragma unroll
      for (int i = 0; i < kOutAhead; ++i) v[i] = vn[i];
    }
  }
  if (live) out[h * head_dim + d] = __fmul_rn(acc, inv[h]);
}

// ---- indexer scores ---------------------------------------------------------------------------
// The CPU's order: w'_h = w_h * scale (rounded), then per key s = 0 + w'_0 relu(dot_0) + w'_1
// relu(dot_1) + ... with each dot the CPU's f32 dot. A warp per key (lane = FMA chain), the
// heads in order; q and w' in shared memory.

// Chunks of queries: query y = blockIdx.y at n_keys_at's position + y, its q, w and scores at
// the given strides; queries seeing at most skip_k keys are skipped (skip_k < 0: none are).
struct IxQueries {
  int64_t q_stride = 0, w_stride = 0, s_stride = 0, skip_k = -1;
};
__device__ inline int64_t keys_of_query(const DevCount& c, int64_t y) {
  return c.ratio > 0 ? (c.pos.get() + y + 1) / c.ratio : c.n;
}

__global__ void k_indexer(const float* q, const float* w, float scale, int n_heads, int64_t head_dim,
                          const float* keys, DevCount n_keys_at, float* scores, IxQueries qs_) {
  pdl_begin();
  const int64_t y = blockIdx.y;
  const int64_t n_keys = keys_of_query(n_keys_at, y);
  if (n_keys <= qs_.skip_k) return;
  q += y * qs_.q_stride, w += y * qs_.w_stride, scores += y * qs_.s_stride;
  extern __shared__ float sh[];  // [n_heads*head_dim] q, [n_heads] w*scale
  float* qs = sh;
  float* ws = sh + n_heads * head_dim;
  for (int64_t i = threadIdx.x; i < n_heads * head_dim; i += blockDim.x) qs[i] = q[i];
  for (int i = threadIdx.x; i < n_heads; i += blockDim.x) ws[i] = __fmul_rn(w[i], scale);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t c = blockIdx.x * (int64_t)nw + warp; c < n_keys; c += (int64_t)gridDim.x * nw) {
    const float* k = keys + c * head_dim;
    float acc = 0.0f;
    for (int h = 0; h < n_heads; ++h) {
      const float dot = warp_dot_cpu(qs + h * head_dim, k, head_dim);
      acc = __fadd_rn(acc, __fmul_rn(ws[h], std_max(0.0f, dot)));  // ReLU before the head weight (trap 12)
    }
    if (lane == 0) scores[c] = acc;
  }
}

// ---- top-k ------------------------------------------------------------------------------------

// One block: a radix select of the k-th highest key (8 bits per pass, from the top), then the
// selected indices written in ascending order: every key above the threshold, and the first
// (in index order) of those equal to it. Keys: -0.0 becomes +0.0 (the CPU compares them
// equal, so the lower index must win), then the float order as unsigned order.
constexpr int kTopKThreads = 1024;
__device__ inline uint32_t topk_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of v over the threads of a 1024-thread block (every thread calls it).
__device__ inline int block_exclusive_scan(int v, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();  // warp_sums free for reuse
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  return x - v + (warp > 0 ? warp_sums[warp - 1] : 0);
}

// Block x: the query at count's position + x (scores and idx at its strides; skipped when it
// sees at most skip_k scores).
__global__ void __launch_bounds__(kTopKThreads) k_top_k(const float* scores, DevCount count, int k, int32_t* idx,
                                                        int64_t s_stride, int64_t skip_k) {
  pdl_begin();
  __shared__ unsigned hist[256];
  __shared__ int warp_sums[32];
  __shared__ uint32_t prefix_sh, mask_sh;
  __shared__ int need_sh;
  const int64_t x = blockIdx.x;
  const int64_t n = keys_of_query(count, x);
  if (n <= skip_k) return;  // whole block
  scores += x * s_stride, idx += x * k;
  const int t = threadIdx.x;
  if (t == 0) prefix_sh = 0, mask_sh = 0, need_sh = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (t < 256) hist[t] = 0;
    __syncthreads();
    const uint32_t prefix = prefix_sh, mask = mask_sh;
    const int need = need_sh;
    for (int64_t i = t; i < n; i += kTopKThreads) {
      const uint32_t u = topk_key(scores[i]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    // Bins from the top: the one where the running count first reaches `need`.
    const int b = 255 - t;
    const int c = t < 256 ? static_cast<int>(hist[b]) : 0;
    const int above = block_exclusive_scan(c, warp_sums);  // keys in bins above b
    if (t < 256 && above < need && above + c >= need) {
      prefix_sh = prefix | (static_cast<uint32_t>(b) << shift);
      mask_sh = mask | (255u << shift);
      need_sh = need - above;
    }
    __syncthreads();
  }
  const uint32_t thr = prefix_sh;
  const int take_eq = need_sh;  // how many keys equal to the threshold are selected
  // Thread t owns indices [c0, c1): counts, an exclusive scan over threads, then the writes.
  const int64_t chunk = (n + kTopKThreads - 1) / kTopKThreads;
  const int64_t c0 = t * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
  int gt = 0, eq = 0;
  for (int64_t i = c0; i < c1; ++i) {
    const uint32_t u = topk_key(scores[i]);
    gt += u > thr;
    eq += u == thr;
  }
  const int gt_before = block_exclusive_scan(gt, warp_sums);
  int eq_seen = block_exclusive_scan(eq, warp_sums);
  int out = gt_before + (eq_seen < take_eq ? eq_seen : take_eq);
  for (int64_t i = c0; i < c1; ++i) {
    const uint32_t u = topk_key(scores[i]);
    if (u > thr || (u == thr && eq_seen++ < take_eq)) idx[out++] = static_cast<int32_t>(i);
  }
}

// ---- router -----------------------------------------------------------------------------------
// One block per token (moe_route.cuh).

__global__ void k_moe_route(const float* logits, RouteArgs a) {
  pdl_begin();
  extern __shared__ float sh[];  // [E] s, [E] sel, [E] taken
  route_detail::route_token<false>(logits + blockIdx.x * static_cast<int64_t>(a.n_expert), blockIdx.x, a, sh);
}

}  // namespace

void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, const float* sinks, float scale,
               float* out, int* err, cudaStream_t s, int64_t n_queries) {
  if (n_heads <= 0 || head_dim <= 0 || n_queries <= 0) return;
  if (n_heads > 65535 * kAttnHeads) fail("CUDA attention: {} heads exceed the grid", n_heads);
  if (n_queries > 1 && (!kv.idx_per_query && kv.idx))
    fail("CUDA attention: {} queries share one selection", n_queries);
  if (kv.ring_store && (n_queries != 1 || !kv.fresh)) fail("CUDA attention: a ring store needs one query and its row");
  const int64_t rows = kv.max_rows;
  if (rows <= 0) fail("CUDA attention: no rows to visit");
  // Queries of a chunk run in groups whose scores fit a bounded scratch (256 MiB).
  const int64_t per_query = n_heads * rows * static_cast<int64_t>(sizeof(float));
  const int64_t group = std::clamp<int64_t>((int64_t{256} << 20) / per_query, 1, std::min<int64_t>(n_queries, 65535));
  const size_t sb = (static_cast<size_t>(group * n_heads * rows) * sizeof(float) + 255) / 256 * 256;
  uint8_t* buf = nullptr;
  cudaError_t e = cudaSuccess;
  buf = static_cast<uint8_t*>(block_cache().get(sb + static_cast<size_t>(group * n_heads) * sizeof(float), s, &e));
  if (!buf) check(e, "cudaMallocAsync(attention scores)");
  float* S = reinterpret_cast<float*>(buf);
  float* inv = reinterpret_cast<float*>(buf + sb);
  const unsigned hb = static_cast<unsigned>((n_heads + kAttnHeads - 1) / kAttnHeads);
  const int64_t qn = n_heads * head_dim;
  for (int64_t g0 = 0; g0 < n_queries; g0 += group) {
    const unsigned nz = static_cast<unsigned>(std::min(group, n_queries - g0));
    AttnRows kg = kv;
    kg.pos.off += g0;
    kg.n_comp.pos.off += g0;
    if (kg.idx && kg.idx_per_query) kg.idx += g0 * kg.n_idx;
    const bool tiled = attn_tiled_applies(head_dim, n_queries, 1), tiled_out = attn_tiled_applies(head_dim, n_queries, 2);
    const int rpb = n_queries > 1 ? attn_rows_chunk() : kAttnRows;
    if (tiled)
      attn_scores_tiled(q + g0 * qn, n_heads, head_dim, kg, scale, S, err, nz, s);
    else
      launch(k_attn_scores, dim3(grid_for(rows, rpb), hb, nz), 32 * kAttnHeads, 0, s, q + g0 * qn, n_heads, head_dim,
             kg, scale, S, err, rpb);
    check_launch("attention scores");
    if (n_queries == 1 && !tiled_out && attn_decode_fused()) {
      attn_softmax_out(S, sinks, n_heads, head_dim, kg, out, err, nz, s);
      check_launch("attention softmax + output");
      continue;
    }
    launch(k_attn_softmax, dim3(static_cast<unsigned>(n_heads), 1, nz), 256, 0, s, S, kg, sinks, inv);
    check_launch("attention softmax");
    if (tiled_out)
      attn_out_tiled(S, inv, n_heads, head_dim, kg, out + g0 * qn, err, nz, s);
    else
      launch(k_attn_out, dim3(grid_for(head_dim, 32), hb, nz), 32 * kAttnHeads, 0, s, S, inv, n_heads, head_dim, kg,
             out + g0 * qn, err);
    check_launch("attention output");
  }
  block_cache().put(buf);
}

// The Flash indexer shape (64 heads x 128 dims): a thread per (key, group of 16 heads) replays
// the CPU's 32 FMA chains per head in registers (q broadcast from shared memory, the block's
// 64 keys staged with row stride 129: conflict-free); the weighted heads are then summed in
// order 0..63 by one thread per key.
constexpr int kIxHeads = 64, kIxDim = 128, kIxKeys = 64, kIxGroups = 4, kIxHpg = kIxHeads / kIxGroups;
constexpr int kIxThreads = kIxKeys * kIxGroups, kIxStride = kIxDim + 1;
constexpr size_t kIxShared =
    (kIxHeads * kIxDim + kIxHeads + kIxKeys * kIxStride + kIxKeys * (kIxHeads + 1)) * sizeof(float);

__global__ void __launch_bounds__(kIxThreads) k_indexer_flash(const float* q, const float* w, float scale,
                                                              const float* keys, DevCount n_keys_at,
                                                              float* scores, IxQueries qs_) {
  pdl_begin();
  const int64_t y = blockIdx.y;
  const int64_t n_keys = keys_of_query(n_keys_at, y);
  if (n_keys <= qs_.skip_k) return;
  q += y * qs_.q_stride, w += y * qs_.w_stride, scores += y * qs_.s_stride;
  if (static_cast<int64_t>(blockIdx.x) * kIxKeys >= n_keys) return;  // whole block
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);   // [64][128]
  float* ws = qs + kIxHeads * kIxDim;          // [64] w*scale
  float* ks = ws + kIxHeads;                   // [64 keys][129]
  float* prod = ks + kIxKeys * kIxStride;      // [64 keys][65] weighted relu(dot)
  for (int i = threadIdx.x; i < kIxHeads * kIxDim; i += kIxThreads) qs[i] = q[i];
  for (int i = threadIdx.x; i < kIxHeads; i += kIxThreads) ws[i] = __fmul_rn(w[i], scale);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kIxKeys;
  for (int i = threadIdx.x; i < kIxKeys * kIxDim; i += kIxThreads) {
    const int key = i / kIxDim, dd = i % kIxDim;
    ks[key * kIxStride + dd] = c0 + key < n_keys ? keys[(c0 + key) * kIxDim + dd] : 0.0f;
  }
  __syncthreads();
  const int kl = threadIdx.x % kIxKeys, g = threadIdx.x / kIxKeys;
  const float* kr = ks + kl * kIxStride;
  for (int hh = 0; hh < kIxHpg; ++hh) {
    const int h = g * kIxHpg + hh;
    const float* qh = qs + h * kIxDim;
    float a[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) a[j] = 0.0f;
#pragma unroll
    for (int t = 0; t < kIxDim / 32; ++t)
#pragma unroll
      for (int j = 0; j < 32; ++j) a[j] = fmaf(qh[32 * t + j], kr[32 * t + j], a[j]);
    float v[8];
#pragma unroll
    for (int l = 0; l < 8; ++l) v[l] = __fadd_rn(__fadd_rn(a[l], a[l + 8]), __fadd_rn(a[l + 16], a[l + 24]));
    prod[kl * (kIxHeads + 1) + h] = __fmul_rn(ws[h], std_max(0.0f, fold8(v)));  // ReLU first (trap 12)
  }
  __syncthreads();
  if (threadIdx.x < kIxKeys && c0 + threadIdx.x < n_keys) {
    const float* p = prod + threadIdx.x * (kIxHeads + 1);
    float acc = 0.0f;
    for (int h = 0; h < kIxHeads; ++h) acc = __fadd_rn(acc, p[h]);
    scores[c0 + threadIdx.x] = acc;
  }
}

// The same shape and operations, register-tiled (the default; DS4_CUDA_IX_TILED=0 keeps
// k_indexer_flash; 34 layers on the H100, same call: decode at 2K 113.7/113.4 -> 114.7/115.2
// t/s, 8K prefill 1.007x alone, docs/BENCHMARKS.md session 28): k_indexer_flash's
// thread reads two shared floats (q and key) per FMA, which bounds it by shared-memory loads,
// and at decode (one query, 512 keys at 2K) only 8 blocks run. Here a thread owns 4 heads (hg,
// hg+16, hg+32, hg+48: a warp's 16 head groups hit 16 banks of q's 129-float rows) x 2 keys:
// 6 loads per 8 FMAs. Each dot is still the CPU's: chain j = FMAs over t of q[32t+j] k[32t+j]
// from 0, lane l = (c_l + c_{l+8}) + (c_{l+16} + c_{l+24}), then fold8's tree, formed lane by
// lane in the order fold8 adds them (0,4 / 2,6 / 1,5 / 3,7) so few partial sums stay live.
// KP key pairs per block: 4 (8 keys, 64 threads: decode spreads over 64 blocks at 2K) or 32
// (64 keys as k_indexer_flash, for chunks of queries).
constexpr int kItGroups = 16, kItHpt = kIxHeads / kItGroups, kItQPitch = kIxDim + 1;
static_assert(kItHpt == 4, "4 heads per thread");
__host__ __device__ constexpr size_t it_shared(int kp) {
  return (kIxHeads * kItQPitch + kIxHeads + 2 * kp * kIxStride + 2 * kp * (kIxHeads + 1)) * sizeof(float);
}

template <int KP>
__global__ void __launch_bounds__(kItGroups * KP) k_indexer_tiled(const float* q, const float* w, float scale,
                                                                 const float* keys, DevCount n_keys_at, float* scores,
                                                                 IxQueries qs_) {
  constexpr int kKeys = 2 * KP, kThreads = kItGroups * KP;
  pdl_begin();
  const int64_t y = blockIdx.y;
  const int64_t n_keys = keys_of_query(n_keys_at, y);
  if (n_keys <= qs_.skip_k) return;
  q += y * qs_.q_stride, w += y * qs_.w_stride, scores += y * qs_.s_stride;
  if (static_cast<int64_t>(blockIdx.x) * kKeys >= n_keys) return;  // whole block
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);  // [64][129]
  float* ws = qs + kIxHeads * kItQPitch;      // [64] w*scale
  float* ks = ws + kIxHeads;                  // [kKeys][129]
  float* prod = ks + kKeys * kIxStride;       // [kKeys][65] weighted relu(dot)
  for (int i = threadIdx.x; i < kIxHeads * kIxDim; i += kThreads) qs[(i / kIxDim) * kItQPitch + i % kIxDim] = q[i];
  for (int i = threadIdx.x; i < kIxHeads; i += kThreads) ws[i] = __fmul_rn(w[i], scale);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  for (int i = threadIdx.x; i < kKeys * kIxDim; i += kThreads) {
    const int key = i / kIxDim, dd = i % kIxDim;
    ks[key * kIxStride + dd] = c0 + key < n_keys ? keys[(c0 + key) * kIxDim + dd] : 0.0f;
  }
  __syncthreads();
  const int hg = threadIdx.x % kItGroups, kp = threadIdx.x / kItGroups;
  const float* qh = qs + hg * kItQPitch;  // head hg + 16 hh at qh + 16 hh * kItQPitch
  const float* kr = ks + 2 * kp * kIxStride;
  // Chain j of the thread's 8 dots (index hh * 2 + kk) added to c: c = c + chain (first: c = chain).
  auto chain = [&](int j, float (&c)[8], bool add) {
    float a[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) a[x] = 0.0f;
#pragma unroll
    for (int t = 0; t < kIxDim / 32; ++t) {
      float qv[kItHpt], kv[2];
#pragma unroll
      for (int hh = 0; hh < kItHpt; ++hh) qv[hh] = qh[hh * kItGroups * kItQPitch + 32 * t + j];
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) kv[kk] = kr[kk * kIxStride + 32 * t + j];
#pragma unroll
      for (int hh = 0; hh < kItHpt; ++hh)
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) a[hh * 2 + kk] = fmaf(qv[hh], kv[kk], a[hh * 2 + kk]);
    }
#pragma unroll
    for (int x = 0; x < 8; ++x) c[x] = add ? __fadd_rn(c[x], a[x]) : a[x];
  };
  // Lanes in the order fold8 adds them, ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); lane l of the
  // dots is (c_l + c_{l+8}) + (c_{l+16} + c_{l+24}). Runtime loops: unrolled, the loads of all
  // 32 chains were hoisted (255 registers).
  float u[8], p[8], h0[8], dots[8];
#pragma unroll 1
  for (int i = 0; i < 8; ++i) {
    const int l = (i & 4 ? 1 : 0) + (i & 2 ? 2 : 0) + (i & 1 ? 4 : 0);  // 0 4 2 6 1 5 3 7
    float v[8], w2[8];
    chain(l, v, false);
    chain(l + 8, v, true);
    chain(l + 16, w2, false);
    chain(l + 24, w2, true);
#pragma unroll
    for (int x = 0; x < 8; ++x) v[x] = __fadd_rn(v[x], w2[x]);
    if ((i & 1) == 0) {
#pragma unroll
      for (int x = 0; x < 8; ++x) u[x] = v[x];
    } else {
#pragma unroll
      for (int x = 0; x < 8; ++x) v[x] = __fadd_rn(u[x], v[x]);  // (l + l+4)
      if ((i & 2) == 0) {
#pragma unroll
        for (int x = 0; x < 8; ++x) p[x] = v[x];
      } else {
#pragma unroll
        for (int x = 0; x < 8; ++x) v[x] = __fadd_rn(p[x], v[x]);  // a half of fold8
        if (i == 3) {
#pragma unroll
          for (int x = 0; x < 8; ++x) h0[x] = v[x];
        } else {
#pragma unroll
          for (int x = 0; x < 8; ++x) dots[x] = __fadd_rn(h0[x], v[x]);
        }
      }
    }
  }
#pragma unroll
  for (int hh = 0; hh < kItHpt; ++hh)
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int h = hg + kItGroups * hh, x = hh * 2 + kk;
      const float dot = dots[x];
      prod[(2 * kp + kk) * (kIxHeads + 1) + h] = __fmul_rn(ws[h], std_max(0.0f, dot));  // ReLU first (trap 12)
    }
  __syncthreads();
  if (threadIdx.x < kKeys && c0 + threadIdx.x < n_keys) {
    const float* p = prod + threadIdx.x * (kIxHeads + 1);
    float acc = 0.0f;
    for (int h = 0; h < kIxHeads; ++h) acc = __fadd_rn(acc, p[h]);
    scores[c0 + threadIdx.x] = acc;
  }
}

template <int KP>
void launch_indexer_tiled(const float* q, const float* w, float scale, const float* keys, DevCount n_keys,
                          int64_t max_keys, float* scores, IxQueries qs, unsigned nq, cudaStream_t s) {
  gemv_detail::allow_smem(reinterpret_cast<const void*>(k_indexer_tiled<KP>), it_shared(KP), "indexer_scores (tiled)");
  launch(k_indexer_tiled<KP>, dim3(grid_for(max_keys, 2 * KP), nq), kItGroups * KP, it_shared(KP), s, q, w, scale,
         keys, n_keys, scores, qs);
  check_launch("indexer_scores (64x128, tiled)");
}

void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim, const float* keys,
                    DevCount n_keys, int64_t max_keys, float* scores, cudaStream_t s, int64_t n_queries,
                    int64_t skip_k) {
  if (max_keys <= 0 || n_queries <= 0) return;
  if (n_queries > 65535) fail("CUDA indexer_scores: {} queries exceed the grid", n_queries);
  const unsigned nq = static_cast<unsigned>(n_queries);
  IxQueries qs{n_heads * head_dim, n_heads, max_keys, skip_k};
  if (n_heads == kIxHeads && head_dim == kIxDim) {
    static const bool tiled = env_switch("DS4_CUDA_IX_TILED", true);
    if (tiled) {
      if (nq == 1)
        launch_indexer_tiled<4>(q, w, scale, keys, n_keys, max_keys, scores, qs, nq, s);
      else
        launch_indexer_tiled<32>(q, w, scale, keys, n_keys, max_keys, scores, qs, nq, s);
      return;
    }
    gemv_detail::allow_smem(reinterpret_cast<const void*>(k_indexer_flash), kIxShared, "indexer_scores (64x128)");
    launch(k_indexer_flash, dim3(grid_for(max_keys, kIxKeys), nq), kIxThreads, kIxShared, s, q, w, scale, keys,
           n_keys, scores, qs);
    check_launch("indexer_scores (64x128)");
    return;
  }
  const size_t shm = static_cast<size_t>(n_heads * head_dim + n_heads) * sizeof(float);
  if (shm > 200 * 1024) fail("CUDA indexer_scores: {} heads x {} dims exceed shared memory", n_heads, head_dim);
  const int threads = 256, nw = threads / 32;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(grid_for(max_keys, nw), 4096));
  gemv_detail::allow_smem(reinterpret_cast<const void*>(k_indexer), shm, "indexer_scores");
  launch(k_indexer, dim3(grid, nq), threads, shm, s, q, w, scale, static_cast<int>(n_heads), head_dim, keys, n_keys,
         scores, qs);
  check_launch("indexer_scores");
}

void top_k(const float* scores, DevCount n, int64_t max_n, int64_t k, int32_t* idx, cudaStream_t s, int64_t n_queries,
           int64_t skip_k) {
  if (k <= 0 || n_queries <= 0) return;
  if (max_n > 0x7fffffff || k > max_n) fail("CUDA top_k: k = {} of at most {} scores", k, max_n);
  launch(k_top_k, grid_for(n_queries, 1), kTopKThreads, 0, s, scores, n, static_cast<int>(k), idx, max_n, skip_k);
  check_launch("top_k");
}

void moe_route(const float* logits, int64_t rows, const RouteArgs& a, cudaStream_t s) {
  if (rows <= 0) return;
  if (a.k < 1 || a.k > 64 || a.k > a.n_expert) fail("CUDA moe_route: k = {} outside 1..min(64, {})", a.k, a.n_expert);
  const size_t shm = static_cast<size_t>(3 * a.n_expert) * sizeof(float);
  if (shm > 48 * 1024) fail("CUDA moe_route: {} experts exceed the kernel's shared memory", a.n_expert);
  launch(k_moe_route, grid_for(rows, 1), 256, shm, s, logits, a);
  check_launch("moe_route");
}

}  // namespace ds4::cuda
