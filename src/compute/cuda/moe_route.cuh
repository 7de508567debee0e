#pragma once
// The MoE router's selection for one token by one block (backend.h moe_route), shared by
// k_moe_route (cuda_ops_attention.cu) and the router product that ends in it
// (gemv.cu, k_xfmatmul_route): s_e = sqrt(softplus(logit)) (expf/log1pf rounded as glibc, see
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
// wrote them). sh: 2 * n_expert floats of shared memory. Every thread of the block calls it.
// The top k runs on warp 0 alone (each lane holds experts lane + 32u, u < kPerLane; k rounds of a
// warp arg-max, no block barrier inside): the same ids as k rounds of a block arg-max, since
// `better` is a total order on (value, id).
__device__ inline void route_token(const float* lg, int64_t t, const RouteArgs& a, float* sh) {
  __shared__ int chosen[64];
  float* s = sh;
  float* sel = sh + a.n_expert;
  for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x) {
    const float x = __ldcg(lg + e);
    const float sp = x > 20.0f ? x : log1pf_ref(expf_ref(x));
    const float v = sqrtf(sp);
    s[e] = v;
    sel[e] = a.bias ? v + a.bias[e] : v;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  if (a.tid2eid) {
    if (lane == 0) {
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
    if (lane == 0)
      for (int i = 0; i < a.k; ++i) {
        int id = a.forced[t * a.k + i];
        if (id < 0 || id >= a.n_expert) {
          if (atomicCAS(a.err, 0, kErrRouteExpert) == 0) a.err[1] = id;
          id = 0;
        }
        chosen[i] = id;
      }
  } else {
    float v[kPerLane];
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int e = lane + 32 * u;
      v[u] = e < a.n_expert ? sel[e] : 0.0f;
    }
    unsigned taken = 0;  // bit u: expert lane + 32u chosen (or absent)
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      if (lane + 32 * u >= a.n_expert) taken |= 1u << u;
    for (int i = 0; i < a.k; ++i) {
      float bv = 0.0f;
      int bi = -1;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u)
        if (!(taken >> u & 1u) && (bi < 0 || better(v[u], lane + 32 * u, bv, bi))) bv = v[u], bi = lane + 32 * u;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, bv, o);
        const int oi = __shfl_xor_sync(kFull, bi, o);
        if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) bv = ov, bi = oi;
      }
      if (bi >= 0 && (bi & 31) == lane) taken |= 1u << (bi >> 5);
      if (lane == 0) chosen[i] = bi;
    }
  }
  __syncwarp();
  if (lane == 0) {
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
