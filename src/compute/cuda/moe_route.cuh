#pragma once
// The MoE router's selection for one token by one block (backend.h moe_route), shared by
// k_moe_route (cuda_ops_attention.cu) and the router product that ends in it
// (router.cu, k_xfmatmul_route): s_e = sqrt(softplus(logit)) (expf/log1pf rounded as glibc, see
// cuda_util.cuh), then either the hash table's ids, the forced ids (benchmark routing: read from
// device memory, so a recorded step sees each replay's ids) or the top k of s_e + bias (equal
// values: the lower id), then the weights in slot order. No a*b+c: the same bits whatever the
// including file's FMA contraction.
#include <cstdint>

#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"

namespace ds4::cuda::route_detail {

__device__ inline bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// Experts per lane of warp 0's top-k.
constexpr int kPerLane = 16;
static_assert(32 * kPerLane >= kRouteMaxExperts, "the top-k holds every expert");

// Token t's routing from its logits row lg (read through L2: in the fused product another block
// wrote them). Every thread of the block calls it. sh: shared memory of 2 * n_expert floats
// (kWarpTopK) or 3 * n_expert. The top k as k rounds of an arg-max on (value, id), a total order
// (`better`), so both ways give the same ids:
//  kWarpTopK false: k rounds of a block arg-max (two block barriers each; k_moe_route's way);
//  kWarpTopK true:  on warp 0 alone, each lane holding experts lane + 32u (u < kPerLane), no
//                   block barrier inside (the fused router's way; not yet run on a GPU).
template <bool kWarpTopK>
__device__ inline void route_token(const float* lg, int64_t t, const RouteArgs& a, float* sh) {
  __shared__ int chosen[64];
  __shared__ float wv[32];
  __shared__ int wi[32];
  float* s = sh;
  float* sel = sh + a.n_expert;
  float* taken = sh + 2 * a.n_expert;  // the block rounds only (as float 0/1)
  for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x) {
    const float x = __ldcg(lg + e);
    const float sp = x > 20.0f ? x : log1pf_ref(expf_ref(x));
    const float v = sqrtf(sp);
    s[e] = v;
    sel[e] = a.bias ? v + a.bias[e] : v;
    if constexpr (!kWarpTopK) taken[e] = 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (a.tid2eid) {
    if (threadIdx.x == 0) {
      const int32_t tok = a.tokens[t];
      const bool ok = tok >= 0 && tok < a.n_tid_rows;
      if (!ok && atomicCAS(a.err, 0, kErrRouteToken) == 0) a.err[1] = tok;
      for (int i = 0; i < a.k; ++i) {
        int id = ok ? a.tid2eid[static_cast<int64_t>(tok) * a.k + i] : 0;
        if (id < 0 || id >= a.n_expert) {
          if (ok && atomicCAS(a.err, 0, kErrRouteExpert) == 0) a.err[1] = id;
          id = 0;
        }
        chosen[i] = id;
      }
    }
  } else if (a.forced) {
    if (threadIdx.x == 0)
      for (int i = 0; i < a.k; ++i) {
        int id = a.forced[t * a.k + i];
        if (id < 0 || id >= a.n_expert) {
          if (atomicCAS(a.err, 0, kErrRouteExpert) == 0) a.err[1] = id;
          id = 0;
        }
        chosen[i] = id;
      }
  } else if constexpr (kWarpTopK) {
    if (warp == 0) {
      float v[kPerLane];
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const int e = lane + 32 * u;
        v[u] = e < a.n_expert ? sel[e] : 0.0f;
      }
      unsigned tk = 0;  // bit u: expert lane + 32u chosen (or absent)
#pragma unroll
      for (int u = 0; u < kPerLane; ++u)
        if (lane + 32 * u >= a.n_expert) tk |= 1u << u;
      for (int i = 0; i < a.k; ++i) {
        float bv = 0.0f;
        int bi = -1;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u)
          if (!(tk >> u & 1u) && (bi < 0 || better(v[u], lane + 32 * u, bv, bi))) bv = v[u], bi = lane + 32 * u;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          const float ov = __shfl_xor_sync(kFull, bv, o);
          const int oi = __shfl_xor_sync(kFull, bi, o);
          if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) bv = ov, bi = oi;
        }
        if (bi >= 0 && (bi & 31) == lane) tk |= 1u << (bi >> 5);
        if (lane == 0) chosen[i] = bi;
      }
    }
  } else {
    for (int i = 0; i < a.k; ++i) {
      float bv = -INFINITY;
      int bi = -1;
      for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x)
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
    for (int i = 0; i < a.k; ++i) sum += s[chosen[i]];
    const float denom = a.norm ? std_max(sum, 6.103515625e-5f) : 1.0f;
    for (int i = 0; i < a.k; ++i) {
      a.experts[t * a.k + i] = chosen[i];
      a.weights[t * a.k + i] = s[chosen[i]] / denom * a.scale;
    }
  }
}

}  // namespace ds4::cuda::route_detail
