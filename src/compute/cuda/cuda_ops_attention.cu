// Decode attention (one query, all heads, window + compressed/indexed rows, sinks), the CSA
// indexer's scores, top-k selection (CUB radix sort) and the MoE router of the CUDA backend.
// Built with nvcc's default FMA contraction (CMakeLists.txt says why that is safe here).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>

#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "core/error.h"

namespace ds4::cuda {

namespace {

// ---- attention --------------------------------------------------------------------------------
// Split over rows: warp w of block (c, g) takes head h = g*kHeadsPerBlock + w over rows
// [c*rpb, (c+1)*rpb) with an online softmax (running max m, sum l, accumulator o) and writes
// one partial (m, l, o[head_dim]) for (h, c); the block's warps walk the same rows, so each
// row comes from L2 once per block and from L1 for the other heads. A second kernel merges a
// head's partials with its sink. Lane `lane` holds dims lane + 32*j. The result equals the
// CPU's two-pass softmax up to float rounding (other summation order, rescaling by e^{m-m'}).

constexpr int kHeadsPerBlock = 8;

__device__ inline const float* attn_row(const AttnRows& kv, int64_t r, int64_t head_dim, int* err) {
  if (r < kv.n_win) {
    const int64_t pp = kv.first_pos + r;
    return kv.ring + (pp % kv.window) * head_dim;
  }
  int64_t c = r - kv.n_win;
  if (kv.idx) {
    const int32_t v = kv.idx[c];
    if (v < 0 || v >= kv.n_comp) {
      if (atomicCAS(err, 0, kErrAttnIndex) == 0) err[1] = v;
      return nullptr;
    }
    c = v;
  }
  return kv.comp + c * head_dim;
}

template <int J>
__global__ void k_attn_partial(const float* q, int64_t n_heads, int64_t head_dim, AttnRows kv,
                               int64_t rows_per_block, float scale, float* part, int* err) {
  const int c = blockIdx.x, nb = gridDim.x;
  const int lane = threadIdx.x & 31;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kHeadsPerBlock + (threadIdx.x >> 5);
  if (h >= n_heads) return;  // whole warp; no block-wide synchronization below
  const float* qh = q + h * head_dim;
  float qv[J], o[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t d = lane + 32 * j;
    qv[j] = d < head_dim ? qh[d] : 0.0f;
    o[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t total = kv.n_win + kv.n_sel;
  const int64_t r0 = c * rows_per_block, r1 = min(total, r0 + rows_per_block);
  // Two rows per step so that two rows' loads are in flight; updates stay in row order.
  for (int64_t r = r0; r < r1; r += 2) {
    const float* row0 = attn_row(kv, r, head_dim, err);  // null: bad index, recorded, skipped
    const float* row1 = r + 1 < r1 ? attn_row(kv, r + 1, head_dim, err) : nullptr;
    float rv0[J], rv1[J];
    float dot0 = 0.0f, dot1 = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t d = lane + 32 * j;
      rv0[j] = row0 && d < head_dim ? __ldg(row0 + d) : 0.0f;
      rv1[j] = row1 && d < head_dim ? __ldg(row1 + d) : 0.0f;
      dot0 += qv[j] * rv0[j];
      dot1 += qv[j] * rv1[j];
    }
    dot0 = warp_sum(dot0);
    dot1 = warp_sum(dot1);
    if (row0) {
      const float s0 = dot0 * scale;
      const float mn = fmaxf(m, s0);
      const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
      const float e = expf(s0 - mn);
      l = l * corr + e;
#pragma unroll
      for (int j = 0; j < J; ++j) o[j] = o[j] * corr + e * rv0[j];
      m = mn;
    }
    if (row1) {
      const float s1 = dot1 * scale;
      const float mn = fmaxf(m, s1);
      const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
      const float e = expf(s1 - mn);
      l = l * corr + e;
#pragma unroll
      for (int j = 0; j < J; ++j) o[j] = o[j] * corr + e * rv1[j];
      m = mn;
    }
  }
  float* out = part + (h * nb + c) * (head_dim + 2);
  if (lane == 0) out[0] = m, out[1] = l;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < head_dim) out[2 + d] = o[j];
  }
}

// One block per head: merge the nb partials with the sink (denominator e^{sink-M} + sum).
__global__ void k_attn_combine(const float* part, int nb, int64_t head_dim, const float* sinks, float* out) {
  __shared__ float wgt[1024];
  __shared__ float inv_den;
  const int h = blockIdx.x;
  const float* ph = part + static_cast<int64_t>(h) * nb * (head_dim + 2);
  if (threadIdx.x == 0) {
    float M = sinks[h];
    for (int c = 0; c < nb; ++c) M = fmaxf(M, ph[c * (head_dim + 2)]);
    float den = expf(sinks[h] - M);
    for (int c = 0; c < nb; ++c) {
      const float mc = ph[c * (head_dim + 2)];
      const float w = mc == -INFINITY ? 0.0f : expf(mc - M);
      wgt[c] = w;
      den += ph[c * (head_dim + 2) + 1] * w;
    }
    inv_den = 1.0f / den;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int c = 0; c < nb; ++c) acc += ph[c * (head_dim + 2) + 2 + d] * wgt[c];
    out[h * head_dim + d] = acc * inv_den;
  }
}

template <int J>
void launch_attn_partial(dim3 grid, cudaStream_t s, const float* q, int64_t n_heads, int64_t head_dim,
                         const AttnRows& kv, int64_t rpb, float scale, float* part, int* err) {
  k_attn_partial<J><<<grid, 32 * kHeadsPerBlock, 0, s>>>(q, n_heads, head_dim, kv, rpb, scale, part, err);
}

// ---- indexer scores ---------------------------------------------------------------------------
// q (n_heads x head_dim) and the head weights in shared memory; one warp per key, the key's
// row in registers (lane holds dims lane + 32*j); heads summed in order 0..n_heads-1 as the CPU.

template <int J>
__global__ void k_indexer(const float* q, const float* w, float scale, int n_heads, int64_t head_dim,
                          const float* keys, int64_t n_keys, float* scores) {
  extern __shared__ float sh[];  // [n_heads*head_dim] q, [n_heads] w*scale
  float* qs = sh;
  float* ws = sh + n_heads * head_dim;
  for (int64_t i = threadIdx.x; i < n_heads * head_dim; i += blockDim.x) qs[i] = q[i];
  for (int i = threadIdx.x; i < n_heads; i += blockDim.x) ws[i] = w[i] * scale;  // rounded first
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t c = blockIdx.x * (int64_t)nw + warp; c < n_keys; c += (int64_t)gridDim.x * nw) {
    const float* k = keys + c * head_dim;
    float kv[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t d = lane + 32 * j;
      kv[j] = d < head_dim ? k[d] : 0.0f;
    }
    float acc = 0.0f;
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = qs + h * head_dim;
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < head_dim) dot += qh[d] * kv[j];
      }
      dot = warp_sum(dot);
      acc += ws[h] * std_max(0.0f, dot);  // ReLU before the head weight (trap 12)
    }
    if (lane == 0) scores[c] = acc;
  }
}

// The Flash indexer shape (64 heads x 128 dims) as a tiled product: one thread per (key, group
// of 16 heads), 64 keys a block. Warps 2g, 2g+1 hold group g, so a warp's q reads are one
// broadcast address; 32 dims of the block's keys are staged in shared memory at a time (row
// stride 33: conflict-free). Each head's dot accumulates over dims in order; the heads are
// then summed in order 0..63 as the CPU does, group g continuing group g-1's sum.
constexpr int kIxHeads = 64, kIxDim = 128, kIxGroups = 4, kIxHpg = kIxHeads / kIxGroups;
constexpr int kIxKeys = 64, kIxThreads = kIxKeys * kIxGroups, kIxChunk = 32;
constexpr size_t kIxShared = (kIxHeads * kIxDim + kIxHeads + kIxKeys * (kIxChunk + 1) + kIxKeys) * sizeof(float);

__global__ void __launch_bounds__(kIxThreads) k_indexer_flash(const float* q, const float* w, float scale,
                                                              const float* keys, int64_t n_keys, float* scores) {
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);  // [64][128]
  float* ws = qs + kIxHeads * kIxDim;         // [64] w*scale
  float* ks = ws + kIxHeads;                  // [64 keys][33]
  float* sum = ks + kIxKeys * (kIxChunk + 1); // [64] running head sum per key
  for (int i = threadIdx.x; i < kIxHeads * kIxDim; i += kIxThreads) qs[i] = q[i];
  for (int i = threadIdx.x; i < kIxHeads; i += kIxThreads) ws[i] = w[i] * scale;  // rounded first
  const int g = threadIdx.x / kIxKeys, kl = threadIdx.x % kIxKeys;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kIxKeys;
  const float* qg = qs + g * kIxHpg * kIxDim;
  float acc[kIxHpg];
#pragma unroll
  for (int hh = 0; hh < kIxHpg; ++hh) acc[hh] = 0.0f;
  for (int d0 = 0; d0 < kIxDim; d0 += kIxChunk) {
    __syncthreads();  // q loaded / the previous chunk consumed
    for (int i = threadIdx.x; i < kIxKeys * kIxChunk; i += kIxThreads) {
      const int key = i / kIxChunk, dd = i % kIxChunk;
      const int64_t c = c0 + key;
      ks[key * (kIxChunk + 1) + dd] = c < n_keys ? keys[c * kIxDim + d0 + dd] : 0.0f;
    }
    __syncthreads();
    const float* kr = ks + kl * (kIxChunk + 1);
#pragma unroll
    for (int dd = 0; dd < kIxChunk; dd += 4) {
      const float k0 = kr[dd], k1 = kr[dd + 1], k2 = kr[dd + 2], k3 = kr[dd + 3];
#pragma unroll
      for (int hh = 0; hh < kIxHpg; ++hh) {
        const float4 qv = *reinterpret_cast<const float4*>(qg + hh * kIxDim + d0 + dd);
        float a = acc[hh];
        a += qv.x * k0;
        a += qv.y * k1;
        a += qv.z * k2;
        a += qv.w * k3;
        acc[hh] = a;
      }
    }
  }
#pragma unroll
  for (int gg = 0; gg < kIxGroups; ++gg) {
    if (g == gg) {
      float t = gg == 0 ? 0.0f : sum[kl];
#pragma unroll
      for (int hh = 0; hh < kIxHpg; ++hh) t += ws[gg * kIxHpg + hh] * std_max(0.0f, acc[hh]);  // ReLU first
      sum[kl] = t;
    }
    __syncthreads();
  }
  if (g == 0 && c0 + kl < n_keys) scores[c0 + kl] = sum[kl];
}

// ---- top-k ------------------------------------------------------------------------------------

// Keys for the descending sort: -0.0 becomes +0.0 (the CPU compares them equal, so the lower
// index must win; the radix order would put +0 first).
__global__ void k_topk_prep(const float* scores, int64_t n, float* keys, uint32_t* vals) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = scores[i];
  keys[i] = v == 0.0f ? 0.0f : v;
  vals[i] = static_cast<uint32_t>(i);
}

// ---- router -----------------------------------------------------------------------------------
// One block per token: s_e = sqrt(softplus(logit)) (expf/log1pf rounded as glibc, see
// cuda_util.cuh), then either the hash table's ids or k rounds of a block arg-max over
// s_e + bias (equal values: the lower id), then the weights in slot order.

__device__ inline bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

__global__ void k_moe_route(const float* logits, const int32_t* tokens, int n_expert, int k, const float* bias,
                            const int32_t* tid2eid, int64_t n_tid_rows, bool norm, float scale, int32_t* experts,
                            float* weights, int* err) {
  extern __shared__ float sh[];  // [E] s, [E] sel, [E] taken (as float 0/1)
  __shared__ float wv[32];
  __shared__ int wi[32];
  __shared__ int chosen[64];
  float* s = sh;
  float* sel = sh + n_expert;
  float* taken = sh + 2 * n_expert;
  const int64_t t = blockIdx.x;
  const float* lg = logits + t * n_expert;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    const float x = lg[e];
    const float sp = x > 20.0f ? x : log1pf_ref(expf_ref(x));
    const float v = sqrtf(sp);
    s[e] = v;
    sel[e] = bias ? v + bias[e] : v;
    taken[e] = 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (tid2eid) {
    if (threadIdx.x == 0) {
      const int32_t tok = tokens[t];
      bool ok = tok >= 0 && tok < n_tid_rows;
      if (!ok && atomicCAS(err, 0, kErrRouteToken) == 0) err[1] = tok;
      for (int i = 0; i < k; ++i) {
        int id = ok ? tid2eid[static_cast<int64_t>(tok) * k + i] : 0;
        if (id < 0 || id >= n_expert) {
          if (ok && atomicCAS(err, 0, kErrRouteExpert) == 0) err[1] = id;
          id = 0;
        }
        chosen[i] = id;
      }
    }
  } else {
    for (int i = 0; i < k; ++i) {
      float bv = -INFINITY;
      int bi = -1;
      for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        if (taken[e] == 0.0f && (bi < 0 || better(sel[e], e, bv, bi))) bv = sel[e], bi = e;
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, o);
        const int oi = __shfl_xor_sync(kFull, bi, o);
        if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) bv = ov, bi = oi;
      }
      if (lane == 0) wv[warp] = bv, wi[warp] = bi;
      __syncthreads();
      if (threadIdx.x == 0) {
        float v = wv[0];
        int id = wi[0];
        for (int w = 1; w < nw; ++w)
          if (wi[w] >= 0 && (id < 0 || better(wv[w], wi[w], v, id))) v = wv[w], id = wi[w];
        chosen[i] = id;
        taken[id] = 1.0f;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += s[chosen[i]];
    const float denom = norm ? std_max(sum, 6.103515625e-5f) : 1.0f;
    for (int i = 0; i < k; ++i) {
      experts[t * k + i] = chosen[i];
      weights[t * k + i] = s[chosen[i]] / denom * scale;
    }
  }
}

unsigned blocks_for(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  if (g > 0x7fffffff) fail("CUDA: {} elements exceed one grid", n);
  return static_cast<unsigned>(std::max<int64_t>(1, g));
}

}  // namespace

void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, const float* sinks, float scale,
               float* out, int* err, cudaStream_t s) {
  if (n_heads <= 0 || head_dim <= 0) return;
  if (head_dim > 1024) fail("CUDA attention: head_dim {} exceeds 1024", head_dim);
  if (n_heads > 65535 * kHeadsPerBlock) fail("CUDA attention: {} heads exceed the grid", n_heads);
  const int64_t total = kv.n_win + kv.n_sel;
  // 8..256 rows a warp, about 64 chunks at short contexts; at most 1024 partials a head.
  int64_t rpb = std::clamp<int64_t>((total + 63) / 64, 8, 256);
  rpb = std::max<int64_t>(rpb, (total + 1023) / 1024);
  const int64_t nb = std::max<int64_t>(1, (total + rpb - 1) / rpb);
  float* part = nullptr;
  const size_t part_bytes = static_cast<size_t>(n_heads * nb * (head_dim + 2)) * sizeof(float);
  check(cudaMallocAsync(reinterpret_cast<void**>(&part), part_bytes, s), "cudaMallocAsync(attention partials)");
  const dim3 grid(static_cast<unsigned>(nb), static_cast<unsigned>((n_heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  const int J = static_cast<int>((head_dim + 31) / 32);
  if (J <= 1) launch_attn_partial<1>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  else if (J <= 2) launch_attn_partial<2>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  else if (J <= 4) launch_attn_partial<4>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  else if (J <= 8) launch_attn_partial<8>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  else if (J <= 16) launch_attn_partial<16>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  else launch_attn_partial<32>(grid, s, q, n_heads, head_dim, kv, rpb, scale, part, err);
  check_launch("attention_partial");
  k_attn_combine<<<static_cast<unsigned>(n_heads), 256, 0, s>>>(part, static_cast<int>(nb), head_dim, sinks, out);
  check_launch("attention_combine");
  check(cudaFreeAsync(part, s), "cudaFreeAsync(attention partials)");
}

void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim, const float* keys,
                    int64_t n_keys, float* scores, cudaStream_t s) {
  if (n_keys <= 0) return;
  if (n_heads == kIxHeads && head_dim == kIxDim) {
    k_indexer_flash<<<blocks_for(n_keys, kIxKeys), kIxThreads, kIxShared, s>>>(q, w, scale, keys, n_keys, scores);
    check_launch("indexer_scores (64x128)");
    return;
  }
  if (head_dim > 1024) fail("CUDA indexer_scores: head_dim {} exceeds 1024", head_dim);
  const size_t shm = static_cast<size_t>(n_heads * head_dim + n_heads) * sizeof(float);
  if (shm > 200 * 1024) fail("CUDA indexer_scores: {} heads x {} dims exceed shared memory", n_heads, head_dim);
  const int threads = 256, nw = threads / 32;
  // At least 4 keys a warp: each block reads q (n_heads*head_dim floats) once from L2.
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks_for(n_keys, nw * 4), 1024));
  const int J = static_cast<int>((head_dim + 31) / 32);
  const int nh = static_cast<int>(n_heads);
  auto go = [&](auto kern) {
    if (shm > 48 * 1024)
      check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm)),
            "cudaFuncSetAttribute(indexer_scores)");
    kern<<<grid, threads, shm, s>>>(q, w, scale, nh, head_dim, keys, n_keys, scores);
  };
  if (J <= 1) go(k_indexer<1>);
  else if (J <= 2) go(k_indexer<2>);
  else if (J <= 4) go(k_indexer<4>);
  else if (J <= 8) go(k_indexer<8>);
  else if (J <= 16) go(k_indexer<16>);
  else go(k_indexer<32>);
  check_launch("indexer_scores");
}

void top_k(const float* scores, int64_t n, int64_t k, int32_t* idx, cudaStream_t s) {
  if (k <= 0) return;
  if (n > 0x7fffffff) fail("CUDA top_k: {} scores exceed the sort's range", n);
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < n) ++bits;
  size_t t1 = 0, t2 = 0;
  check(cub::DeviceRadixSort::SortPairsDescending(nullptr, t1, static_cast<const float*>(nullptr),
                                                   static_cast<float*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                   static_cast<uint32_t*>(nullptr), ni, 0, 32, s),
        "cub SortPairsDescending (size)");
  check(cub::DeviceRadixSort::SortKeys(nullptr, t2, static_cast<const uint32_t*>(nullptr),
                                       static_cast<uint32_t*>(nullptr), ki, 0, bits, s),
        "cub SortKeys (size)");
  const size_t temp = std::max(t1, t2);
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t nf = align(static_cast<size_t>(n) * 4);
  uint8_t* buf = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4 * nf + align(temp), s), "cudaMallocAsync(top_k)");
  float* keys_in = reinterpret_cast<float*>(buf);
  float* keys_out = reinterpret_cast<float*>(buf + nf);
  uint32_t* vals_in = reinterpret_cast<uint32_t*>(buf + 2 * nf);
  uint32_t* vals_out = reinterpret_cast<uint32_t*>(buf + 3 * nf);
  void* tmp = buf + 4 * nf;
  k_topk_prep<<<blocks_for(n, 256), 256, 0, s>>>(scores, n, keys_in, vals_in);
  check_launch("top_k_prep");
  // Radix sort is stable: equal keys keep ascending index order, so the lower index wins.
  size_t tb = temp;
  check(cub::DeviceRadixSort::SortPairsDescending(tmp, tb, keys_in, keys_out, vals_in, vals_out, ni, 0, 32, s),
        "cub SortPairsDescending");
  tb = temp;
  check(cub::DeviceRadixSort::SortKeys(tmp, tb, vals_out, reinterpret_cast<uint32_t*>(idx), ki, 0, bits, s),
        "cub SortKeys");
  check(cudaFreeAsync(buf, s), "cudaFreeAsync(top_k)");
}

void moe_route(const float* logits, const int32_t* tokens, int64_t rows, int64_t n_expert, int64_t k,
               const float* bias, const int32_t* tid2eid, int64_t n_tid_rows, bool norm, float scale,
               int32_t* experts, float* weights, int* err, cudaStream_t s) {
  if (rows <= 0) return;
  if (k < 1 || k > 64 || k > n_expert) fail("CUDA moe_route: k = {} outside 1..min(64, {})", k, n_expert);
  const size_t shm = static_cast<size_t>(3 * n_expert) * sizeof(float);
  if (shm > 48 * 1024) fail("CUDA moe_route: {} experts exceed the kernel's shared memory", n_expert);
  k_moe_route<<<blocks_for(rows, 1), 256, shm, s>>>(logits, tokens, static_cast<int>(n_expert), static_cast<int>(k),
                                                    bias, tid2eid, n_tid_rows, norm, scale, experts, weights, err);
  check_launch("moe_route");
}

}  // namespace ds4::cuda
