// Hyper-connection kernels of the CUDA backend: hc_pre (the streams' RMS, the mixes' split with
// Sinkhorn, x_in), its fusion with the mix matmul and the following RMSNorm (hc_pre_norm), and
// hc_post. Compiled with --fmad=false like cuda_ops_misc.cu: the float operations are the CPU
// backend's, in its order (cuda_util.cuh), so results are bit-exact with it.
#include <cuda_fp16.h>

#include <cmath>

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_norm.cuh"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

// compute::hc_split_mix, operation for operation (expf as glibc rounds it: cuda_util.cuh).
__device__ void hc_split_mix_dev(const float* mix, const float* scale, const float* base, int n_hc, int iters,
                                 float eps, float* pre, float* post, float* comb) {
  auto sigmoid = [](float v) { return 1.0f / (1.0f + expf_ref(-v)); };
  for (int i = 0; i < n_hc; ++i) {
    pre[i] = sigmoid(mix[i] * scale[0] + base[i]) + eps;
    post[i] = 2.0f * sigmoid(mix[n_hc + i] * scale[1] + base[n_hc + i]);
  }
  const int off = 2 * n_hc;
  for (int i = 0; i < n_hc; ++i) {
    float* row = comb + i * n_hc;
    float mx = -INFINITY;
    for (int j = 0; j < n_hc; ++j) {
      row[j] = mix[off + i * n_hc + j] * scale[2] + base[off + i * n_hc + j];
      mx = std_max(mx, row[j]);
    }
    float sum = 0;
    for (int j = 0; j < n_hc; ++j) sum += row[j] = expf_ref(row[j] - mx);
    for (int j = 0; j < n_hc; ++j) row[j] = row[j] / sum + eps;
  }
  auto col_norm = [&] {
    for (int j = 0; j < n_hc; ++j) {
      float s = 0;
      for (int i = 0; i < n_hc; ++i) s += comb[i * n_hc + j];
      for (int i = 0; i < n_hc; ++i) comb[i * n_hc + j] /= s + eps;
    }
  };
  auto row_norm = [&] {
    for (int i = 0; i < n_hc; ++i) {
      float s = 0;
      for (int j = 0; j < n_hc; ++j) s += comb[i * n_hc + j];
      for (int j = 0; j < n_hc; ++j) comb[i * n_hc + j] /= s + eps;
    }
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    row_norm();
    col_norm();
  }
}

// pre and post of the split for lane L < n_hc: compute::hc_split_mix's operations.
__device__ inline void hc_pre_post_lane(const float* mix, const float* scale, const float* base, int n_hc, int L,
                                        float eps, float* pre, float* post) {
  pre[L] = 1.0f / (1.0f + expf_ref(-(mix[L] * scale[0] + base[L]))) + eps;
  post[L] = 2.0f * (1.0f / (1.0f + expf_ref(-(mix[n_hc + L] * scale[1] + base[n_hc + L]))));
}

// comb of the split on one warp, lane L = i*n_hc + j holding comb[i][j] (n_hc*n_hc <= 32): each
// row/column sum gathers its terms by shuffles and adds them in the CPU's index order, so
// every lane performs exactly the serial version's operations for its entry.
// N > 0: n_hc known at compile time (loops unrolled, so a sum's broadcasts issue together);
// N == 0: n_hc_rt. The same operations in the same order either way.
template <int N>
__device__ void hc_comb_warp(const float* mix, const float* scale, const float* base, int n_hc_rt, int iters, float eps,
                             float* comb) {
  const int n_hc = N > 0 ? N : n_hc_rt;
  const int L = threadIdx.x & 31;
  const bool ok = L < n_hc * n_hc;
  const int i = ok ? L / n_hc : 0, j = ok ? L % n_hc : 0;
  const int off = 2 * n_hc;
  float v = ok ? mix[off + L] * scale[2] + base[off + L] : 0.0f;
  float mx = -INFINITY;
#pragma unroll
  for (int jj = 0; jj < n_hc; ++jj) mx = std_max(mx, __shfl_sync(kFull, v, i * n_hc + jj));
  v = expf_ref(v - mx);
  float sum = 0;
#pragma unroll
  for (int jj = 0; jj < n_hc; ++jj) sum += __shfl_sync(kFull, v, i * n_hc + jj);
  v = v / sum + eps;
  auto col_norm = [&] {
    float t = 0;
#pragma unroll
    for (int ii = 0; ii < n_hc; ++ii) t += __shfl_sync(kFull, v, ii * n_hc + j);
    v /= t + eps;
  };
  auto row_norm = [&] {
    float t = 0;
#pragma unroll
    for (int jj = 0; jj < n_hc; ++jj) t += __shfl_sync(kFull, v, i * n_hc + jj);
    v /= t + eps;
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    row_norm();
    col_norm();
  }
  if (ok) comb[L] = v;
}

// The whole split on one warp.
template <int N>
__device__ void hc_split_mix_warp(const float* mix, const float* scale, const float* base, int n_hc_rt, int iters,
                                  float eps, float* pre, float* post, float* comb) {
  const int n_hc = N > 0 ? N : n_hc_rt;
  const int L = threadIdx.x & 31;
  if (L < n_hc) hc_pre_post_lane(mix, scale, base, n_hc, L, eps, pre, post);
  hc_comb_warp<N>(mix, scale, base, n_hc_rt, iters, eps, comb);
}

constexpr int kMaxHc = 16;

// hc_pre of one row by the whole block: the streams' RMS (double), the mixes scaled in place
// (m: read through L2, another block may have written them), the split (warp Sinkhorn when
// n_hc*n_hc <= 32, else one thread; the head: pre only), post/comb stored unless the head, then
// xo = sum_s pre[s] X[s] in stream order. Xr and xo may be global or shared memory.
__device__ void hc_pre_row(const float* Xr, int n_hc, int64_t n, float* m, const float* scale, const float* base,
                           int iters, float hc_eps, float rms_eps, float* xo, float* post, float* comb) {
  __shared__ float m_sh[(2 + kMaxHc) * kMaxHc];
  __shared__ float pre[kMaxHc], post_sh[kMaxHc], comb_sh[kMaxHc * kMaxHc];
  const bool head = post == nullptr;
  const int n_mix = head ? n_hc : (2 + n_hc) * n_hc;
  const float inv = block_inv_rms(Xr, n_hc * n, rms_eps);
  for (int k = threadIdx.x; k < n_mix; k += blockDim.x) {
    const float v = __ldcg(m + k) * inv;
    m[k] = v;
    m_sh[k] = v;
  }
  __syncthreads();
  if (head) {
    if (threadIdx.x < n_hc) {
      const int i = threadIdx.x;
      pre[i] = 1.0f / (1.0f + expf_ref(-(m_sh[i] * scale[0] + base[i]))) + hc_eps;
    }
  } else if (n_hc * n_hc <= 32) {
    if (threadIdx.x < 32) {
      if (n_hc == 4)
        hc_split_mix_warp<4>(m_sh, scale, base, n_hc, iters, hc_eps, pre, post_sh, comb_sh);
      else
        hc_split_mix_warp<0>(m_sh, scale, base, n_hc, iters, hc_eps, pre, post_sh, comb_sh);
    }
  } else if (threadIdx.x == 0) {
    hc_split_mix_dev(m_sh, scale, base, n_hc, iters, hc_eps, pre, post_sh, comb_sh);
  }
  __syncthreads();
  if (!head) {
    for (int k = threadIdx.x; k < n_hc; k += blockDim.x) post[k] = post_sh[k];
    for (int k = threadIdx.x; k < n_hc * n_hc; k += blockDim.x) comb[k] = comb_sh[k];
  }
  const int64_t step = blockDim.x;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * step) {
    float acc[4] = {0, 0, 0, 0};
    for (int s = 0; s < n_hc; ++s) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = i0 + u * step < n ? Xr[s * n + i0 + u * step] : 0.0f;
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] += pre[s] * v[u];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i0 + u * step < n) xo[i0 + u * step] = acc[u];
  }
}

// One block per row.
__global__ void k_hc_pre(const float* X, float* mix, int n_hc, int64_t n, const float* scale, const float* base,
                         int iters, float hc_eps, float rms_eps, float* x_in, float* post, float* comb) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const bool head = post == nullptr;
  const int n_mix = head ? n_hc : (2 + n_hc) * n_hc;
  hc_pre_row(X + r * n_hc * n, n_hc, n, mix + r * n_mix, scale, base, iters, hc_eps, rms_eps, x_in + r * n,
             head ? nullptr : post + r * n_hc, head ? nullptr : comb + r * n_hc * n_hc);
}

// bar.sync on barrier `id` (1..15; __syncthreads is 0) for `count` threads, a multiple of 32:
// a barrier that the warps left out never reach.
__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The last block's work of the overlapped variant: mixes scaled by rms_inv (read through L2:
// other blocks wrote them), pre/post, then warp 1 runs Sinkhorn for comb while the other warps
// form x_in = sum_s pre[s] X[s] (stream order) and, with the norm, its RMS and the store.
// xs: the staged streams; xi: where x_in is formed (x_in itself, or shared memory with the norm);
// q: the Q8_0 copy of the normed x_in, or none.
__device__ void hc_pre_tail_overlap(const float* xs, int n_hc, int64_t n, float* m, const float* scale,
                                    const float* base, int iters, float hc_eps, float rms_inv, bool norm,
                                    const float* norm_w, float norm_eps, float* xi, float* x_in, float* post,
                                    float* comb, Q8Out q) {
  __shared__ float m_sh[(2 + kMaxHc) * kMaxHc];
  __shared__ float pre[kMaxHc];
  __shared__ double ss_sh[32];
  const bool head = post == nullptr;
  const int n_mix = head ? n_hc : (2 + n_hc) * n_hc;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int k = tid; k < n_mix; k += blockDim.x) {
    const float v = __ldcg(m + k) * rms_inv;
    m[k] = v;
    m_sh[k] = v;
  }
  __syncthreads();
  if (tid < n_hc) {
    if (head)
      pre[tid] = 1.0f / (1.0f + expf_ref(-(m_sh[tid] * scale[0] + base[tid]))) + hc_eps;
    else
      hc_pre_post_lane(m_sh, scale, base, n_hc, tid, hc_eps, pre, post);
  }
  __syncthreads();
  if (!head && warp == 1) {
    if (n_hc == 4)
      hc_comb_warp<4>(m_sh, scale, base, n_hc, iters, hc_eps, comb);
    else
      hc_comb_warp<0>(m_sh, scale, base, n_hc, iters, hc_eps, comb);
    return;
  }
  const int workers = head ? blockDim.x : blockDim.x - 32;
  const int first = head || warp == 0 ? tid : tid - 32;
  for (int64_t i0 = first; i0 < n; i0 += 4 * workers) {
    float acc[4] = {0, 0, 0, 0};
    for (int s = 0; s < n_hc; ++s) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = i0 + u * workers < n ? xs[s * n + i0 + u * workers] : 0.0f;
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] += pre[s] * v[u];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i0 + u * workers < n) xi[i0 + u * workers] = acc[u];
  }
  if (!norm) return;
  // Each worker reads back only the elements it wrote: no barrier before the sum of squares.
  const double ss = warp_sum(sumsq_strided(xi, n, first, workers));
  if (lane == 0) ss_sh[first >> 5] = ss;
  named_barrier(1, workers);
  const double t = warp_sum(lane < (workers >> 5) ? ss_sh[lane] : 0.0);
  rms_store_strided(xi, norm_w, n, inv_rms_of(t, n, norm_eps), x_in, first, workers, q);
}

// hc_pre_norm for one row, fused (backend.h): block b < n_mix stages X and weight row b of fn in
// shared memory and its warp 0 forms mix[b] as the CPU's float dot (32 FMA chains, lane L =
// chain L, folded; width % 32 == 0). The last block to finish (a device counter, reset by that
// block for the next launch) then does what k_hc_pre and k_rms_norm do from its staged X: the
// RMS, the split and Sinkhorn, x_in and its norm.
// kOverlap false: the tail as k_hc_pre / k_rms_norm run it (hc_pre_row, 1024-thread partitions).
// kOverlap true (the default since measured; DS4_CUDA_HC_OVERLAP=0 for the other): staging by cp.async; warps
// 1.. sum the streams' squares while warp 0 forms the dot (every block: only the last one's is
// used); the tail is hc_pre_tail_overlap (Sinkhorn beside x_in and the norm). The double sums
// are partitioned differently, the float operations are the same.
// wtype: 0 F32, 1 F16, 2 BF16 weights.
__device__ unsigned g_hc_done;

template <int kWType>
__device__ __forceinline__ float hc_welem(const uint8_t* w, int i) {
  if constexpr (kWType == 0) return reinterpret_cast<const float*>(w)[i];
  const uint32_t u = reinterpret_cast<const uint16_t*>(w)[i];
  if constexpr (kWType == 1) return __half2float(__ushort_as_half(static_cast<unsigned short>(u)));
  return __uint_as_float(u << 16);
}

template <int kWType, bool kOverlap>
__global__ void __launch_bounds__(1024)
    k_hc_pre_fused(const uint8_t* fn, size_t fn_stride, const float* X, int n_hc, int64_t n, const float* scale,
                   const float* base, int iters, float hc_eps, float rms_eps, bool norm, const float* norm_w,
                   float norm_eps, float* mix, float* x_in, float* post, float* comb, Q8Out q) {
  pdl_trigger();
  extern __shared__ uint4 hsm4[];
  __shared__ bool last;
  __shared__ double ss_part[32];
  constexpr int kES = kWType == 0 ? 4 : 2;
  const int width = n_hc * static_cast<int>(n);
  float* xs = reinterpret_cast<float*>(hsm4);
  uint8_t* ws = reinterpret_cast<uint8_t*>(xs + width);
  const int b = blockIdx.x;
  {
    const uint4* xv = reinterpret_cast<const uint4*>(X);
    const uint4* wv = reinterpret_cast<const uint4*>(fn + static_cast<size_t>(b) * fn_stride);
    uint4* xd = hsm4;
    uint4* wd = reinterpret_cast<uint4*>(ws);
    if constexpr (kOverlap) {
      // The weight row first: it may be read before the streams are ready (pdl_trigger).
      for (int i = threadIdx.x; i < width * kES / 16; i += blockDim.x) cp_async16(smem_addr(wd + i), wv + i);
      pdl_wait();
      for (int i = threadIdx.x; i < width / 4; i += blockDim.x) cp_async16(smem_addr(xd + i), xv + i);
      cp_async_wait_all();
    } else {
      pdl_wait();
      for (int i = threadIdx.x; i < width / 4; i += blockDim.x) xd[i] = __ldg(xv + i);
      for (int i = threadIdx.x; i < width * kES / 16; i += blockDim.x) wd[i] = __ldg(wv + i);
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float a = 0.0f;
#pragma unroll 16
    for (int i = lane; i < width; i += 32) a = fmaf(hc_welem<kWType>(ws, i), xs[i], a);
    const float sum = warp_fold_chains(a);
    if (lane == 0) {
      mix[b] = sum;
      __threadfence();
      last = atomicAdd(&g_hc_done, 1u) == gridDim.x - 1;
    }
  } else if constexpr (kOverlap) {
    const double ss = warp_sum(sumsq_strided(xs, width, threadIdx.x - 32, blockDim.x - 32));
    if ((threadIdx.x & 31) == 0) ss_part[(threadIdx.x >> 5) - 1] = ss;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) g_hc_done = 0;  // for the next launch (stream order: it starts after this one)
  // With the norm, x_in is formed in shared memory first (over the staged weight row, no longer
  // read); each thread then reads back only its own elements for the norm.
  float* xi = norm ? reinterpret_cast<float*>(ws) : x_in;
  if constexpr (kOverlap) {
    const int lane = threadIdx.x & 31, parts = (blockDim.x >> 5) - 1;
    const double ss = warp_sum(lane < parts ? ss_part[lane] : 0.0);
    hc_pre_tail_overlap(xs, n_hc, n, mix, scale, base, iters, hc_eps, inv_rms_of(ss, width, rms_eps), norm, norm_w,
                        norm_eps, xi, x_in, post, comb, q);
  } else {
    hc_pre_row(xs, n_hc, n, mix, scale, base, iters, hc_eps, rms_eps, xi, post, comb);
    if (norm) rms_store(xi, norm_w, n, block_inv_rms(xi, n, norm_eps), x_in, q);
  }
}

// comb of one row from its scaled mixes, the Sinkhorn of hc_pre_tail_overlap by one warp (a
// probe: cuda_backend_check times it; running it on a side stream, forked after the pre-mix and
// joined at hc_post, was measured 7% slower end to end and removed).
__global__ void k_hc_comb(const float* m, const float* scale, const float* base, int n_hc, int iters, float hc_eps,
                          float* comb) {
  pdl_begin();
  if (n_hc == 4)
    hc_comb_warp<4>(m, scale, base, n_hc, iters, hc_eps, comb);
  else
    hc_comb_warp<0>(m, scale, base, n_hc, iters, hc_eps, comb);
}

// y2 (optional): y + y2 first, the add op's float sum (hc_post_add).
__global__ void k_hc_post(const float* y, const float* y2, const float* X, const float* post, const float* comb,
                          int64_t rows, int n_hc, int64_t n, float* Xout) {
  pdl_begin();
  int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t per_row = n_hc * n;
  if (t >= rows * per_row) return;
  const int64_t r = t / per_row, rem = t % per_row;
  const int j = static_cast<int>(rem / n);
  const int64_t d = rem % n;
  const float* Xr = X + r * per_row;
  const float* cr = comb + r * n_hc * n_hc;
  const float yv = y2 ? y[r * n + d] + y2[r * n + d] : y[r * n + d];
  float acc = post[r * n_hc + j] * yv;
  for (int i = 0; i < n_hc; ++i) acc += cr[i * n_hc + j] * Xr[i * n + d];
  Xout[t] = acc;
}

}  // namespace

void hc_pre(const float* X, float* mix, int64_t rows, int n_hc, int64_t n, const float* scale, const float* base,
            int sinkhorn_iters, float hc_eps, float rms_eps, float* x_in, float* post, float* comb, cudaStream_t s) {
  if (rows <= 0) return;
  if (n_hc < 1 || n_hc > kMaxHc) fail("CUDA hc_pre: n_hc {} outside 1..{}", n_hc, kMaxHc);
  launch(k_hc_pre, grid_for(rows, 1), 1024, 0, s, X, mix, n_hc, n, scale, base, sinkhorn_iters, hc_eps, rms_eps, x_in,
         post, comb);
  check_launch("hc_pre");
}

bool hc_pre_fused(int wtype, const uint8_t* fn, size_t fn_stride, int64_t fn_in, int64_t fn_out, const float* X,
                  int n_hc, int64_t n, const float* scale, const float* base, int sinkhorn_iters, float hc_eps,
                  float rms_eps, bool norm, const float* norm_w, float norm_eps, float* mix, float* x_in, float* post,
                  float* comb, bool overlap, cudaStream_t s, Q8Out q) {
  const bool head = post == nullptr;
  const int64_t width = n_hc * n, n_mix = head ? n_hc : (2 + n_hc) * n_hc;
  const size_t es = wtype == 0 ? 4 : 2;
  const size_t smem = static_cast<size_t>(width) * (4 + es);
  const bool shape_ok = n_hc >= 1 && n_hc <= kMaxHc && (head || n_hc * n_hc <= 32) && fn_in == width &&
                        fn_out == n_mix && width % 32 == 0 && 4 * n <= width * static_cast<int64_t>(es) &&
                        smem <= 200 * 1024;
  const bool aligned =
      reinterpret_cast<uintptr_t>(fn) % 16 == 0 && fn_stride % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0;
  if (!shape_ok || !aligned) return false;
  auto run = [&](auto kernel) {
    gemv_detail::allow_smem(reinterpret_cast<const void*>(kernel), smem, "hc_pre (fused)");
    launch(kernel, static_cast<unsigned>(n_mix), 1024, smem, s, fn, fn_stride, X, n_hc, n, scale, base, sinkhorn_iters,
           hc_eps, rms_eps, norm, norm_w, norm_eps, mix, x_in, post, comb, q);
  };
  if (overlap) {
    if (wtype == 0)
      run(k_hc_pre_fused<0, true>);
    else if (wtype == 1)
      run(k_hc_pre_fused<1, true>);
    else
      run(k_hc_pre_fused<2, true>);
  } else {
    if (wtype == 0)
      run(k_hc_pre_fused<0, false>);
    else if (wtype == 1)
      run(k_hc_pre_fused<1, false>);
    else
      run(k_hc_pre_fused<2, false>);
  }
  check_launch("hc_pre (fused with its matmul and norm)");
  return true;
}

void hc_comb(const float* mix, const float* scale, const float* base, int n_hc, int sinkhorn_iters, float hc_eps,
             float* comb, cudaStream_t s) {
  if (n_hc < 1 || n_hc * n_hc > 32) fail("CUDA hc_comb: n_hc {} outside 1..5", n_hc);
  launch(k_hc_comb, 1, 32, 0, s, mix, scale, base, n_hc, sinkhorn_iters, hc_eps, comb);
  check_launch("hc_comb (Sinkhorn)");
}

void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc, int64_t n,
             float* Xout, cudaStream_t s, const float* y2) {
  if (rows <= 0 || n <= 0 || n_hc <= 0) return;
  launch(k_hc_post, grid_for(rows * n_hc * n, 256), 256, 0, s, y, y2, X, post, comb, rows, n_hc, n, Xout);
  check_launch(y2 ? "hc_post (with the add)" : "hc_post");
}

}  // namespace ds4::cuda
