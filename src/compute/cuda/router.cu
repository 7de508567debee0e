// The MoE router of one token in one launch (gemv.h matmul_route; the CUDA backend's
// moe_router, DS4_CUDA_ROUTER_FUSED=0 for the two launches): the float router product as
// k_xfmatmul computes it (cta_fdot, the CPU's order), then the block that finishes last (a
// device counter it resets for the next launch) routes the token from the logits the others
// wrote (moe_route.cuh), which k_moe_route would otherwise do in a launch of its own. Given a
// PreQ8K, its warps also write x's Q8_K quantization, which the routed experts' launch after it
// would otherwise make in a launch of its own (the CUDA backend's DS4_CUDA_ROUTER_Q8K).
#include <cuda_runtime.h>

#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_quant_act.cuh"
#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_exact.cuh"
#include "compute/cuda/gemv_internal.h"
#include "compute/cuda/moe_route.cuh"

namespace ds4::cuda {

namespace {

using namespace gemv_detail;

__device__ unsigned g_route_done;

template <class F>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    k_xfmatmul_route(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out, const float* x, float* logits,
                     FPlan pl, RouteArgs ra, PreQ8K xq) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  __shared__ bool last;
  uint8_t* stage = reinterpret_cast<uint8_t*>(smem4);
  float* res = reinterpret_cast<float*>(stage + pl.rb * pl.slice + static_cast<size_t>(pl.seg_elems) * 4);
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * pl.rb;
  const int nrows = static_cast<int>(n_out - o0 < pl.rb ? n_out - o0 : pl.rb);
  cta_fdot<F, 1>(w + o0 * row_stride, row_stride, n_in, nrows, x, n_in, 1, pl, stage, res);
  for (int t = threadIdx.x; t < nrows; t += blockDim.x) logits[o0 + t] = res[t];
  // x's Q8_K blocks for the routed experts (xq.qs set): warp w of block b takes block b * 8 + w,
  // and so on over the grid (k_quant_q8_K's operations, from x in L2 now).
  if (xq.qs) {
    const int64_t nb = n_in / 256;
    for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); b < nb;
         b += static_cast<int64_t>(gridDim.x) * kWarps)
      q8_K_block_warp(x + 256 * b, threadIdx.x & 31, xq.qs + 256 * b, xq.d + b, xq.bs + 16 * b);
  }
  __threadfence();  // this block's logits reach L2 before the counter counts it
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&g_route_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) g_route_done = 0;  // for the next launch (stream order: it starts after this one)
  route_detail::route_token<true>(logits, 0, ra, reinterpret_cast<float*>(smem4));
}

template <class F>
void launch_route(const DevMatrix& w, const float* x, float* logits, const RouteArgs& ra, const PreQ8K& xq,
                  cudaStream_t s) {
  const FPlan pl = plan_f<F, 1>(w.n_in, w.n_out, 0);
  const size_t smem = std::max(pl.smem, static_cast<size_t>(2 * ra.n_expert) * sizeof(float));
  allow_smem(reinterpret_cast<const void*>(k_xfmatmul_route<F>), smem, "router (fused with its routing)");
  const int64_t blocks = (w.n_out + pl.rb - 1) / pl.rb;
  launch(k_xfmatmul_route<F>, static_cast<unsigned>(blocks), kThreads, smem, s, w.data, w.row_stride, w.n_in, w.n_out,
         x, logits, pl, ra, xq);
  gemv_detail::check_launch("router (fused with its routing)");
}

}  // namespace

bool matmul_route(const DevMatrix& w, const float* x, float* logits, const RouteArgs& ra, cudaStream_t s,
                  const PreQ8K* xq) {
  if (w.n_out != ra.n_expert || w.n_out > kRouteMaxExperts || ra.k < 1 || ra.k > 64 || ra.k > ra.n_expert) return false;
  if (xq && (xq->n != w.n_in || w.n_in % 256 != 0)) return false;
  check_matrix(w, "router");
  const PreQ8K q = xq ? *xq : PreQ8K{};
  switch (w.type) {
    case GgmlType::F32: launch_route<FmtF32>(w, x, logits, ra, q, s); return true;
    case GgmlType::F16: launch_route<FmtF16>(w, x, logits, ra, q, s); return true;
    case GgmlType::BF16: launch_route<FmtBF16>(w, x, logits, ra, q, s); return true;
    default: return false;
  }
}

}  // namespace ds4::cuda
