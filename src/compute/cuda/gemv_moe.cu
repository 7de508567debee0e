// CUDA routed experts (gemv.h moe_experts): one launch computes gate and up for every
// (token, slot) pair and writes h = silu(min(g,limit)) * clamp(u) * weight; h is quantized to the
// down projection's activation format (the CPU's bytes); a second launch computes, per token and
// output row, down_e . h for the token's slots in slot order and their running sum. Expert ids and
// weights are read on the device; an id outside [0, n_expert) makes that token's output NaN
// (the kernel cannot throw, and NaN cannot pass for a result).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/gemm_mma.h"
#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_exact.cuh"
#include "compute/cuda/gemv_formats_ext.cuh"
#include "compute/cuda/gemv_internal.h"
#include "compute/cuda/gemv_warp.cuh"
#include "compute/cuda/swiglu.cuh"
#include "core/error.h"
#include "quant/quant.h"

namespace ds4::cuda {
namespace gemv_detail {
namespace {

struct Geo {
  int l2 = 5, slice = 0;
  size_t smem = 0;
  int64_t rows_per_block = 0;
};

template <class F>
Geo geometry(int64_t n_in, const char* what) {
  Geo g;
  const int64_t items = F::kFloat ? (n_in + 7) / 8 : n_in / F::kBE;
  g.l2 = lanes_per_row_log2(items);
  const int gpw = 32 >> g.l2;
  g.rows_per_block = static_cast<int64_t>(kWarps) * gpw;
  if constexpr (!F::kFloat) g.slice = ((1 << g.l2) * F::kBB + kSliceSlack + 15) / 16 * 16;
  g.smem = static_cast<size_t>(grid_smem_bytes<F>()) + static_cast<size_t>(kWarps) * gpw * g.slice;
  if (g.smem > 200 * 1024) fail("CUDA moe_experts ({}): {} bytes of shared memory", what, g.smem);
  return g;
}

// Activation row `row` of a view (quantized or f32).
template <class F, bool FA>
__device__ __forceinline__ void select_row(ActQ& aq, ActF& af, int64_t row) {
  if constexpr (!F::kFloat && !FA) {
    aq.qs += row * aq.n;
    aq.d += row * (aq.n / F::kActBE);
    if constexpr (F::kQ8K) aq.bs += row * (aq.n / 16);
  } else {
    af.x += row * af.stride;
  }
}

struct ExpertArgs {
  const uint8_t* data;
  size_t expert_stride, row_stride;
  bool vec;
};

// blockIdx.y = pair p0 + y (token p / k, slot p % k); block = rows of gate/up.
template <class F, bool FA>
__global__ void __launch_bounds__(kThreads) k_moe_gate_up(ExpertArgs gate, ExpertArgs up, int64_t n_in, int64_t n_ff,
                                                          int64_t n_expert, ActQ aq, ActF af, const int32_t* experts,
                                                          const float* weights, int64_t k, int64_t p0, float limit,
                                                          float* h, int lpr_log2, int slice_bytes) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const uint2* grid = setup_grid<F>(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = 1 << lpr_log2, gpw = 32 >> lpr_log2;
  const int gl = lane & (lpr - 1), gi = lane >> lpr_log2;
  const int64_t o = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * gpw + gi;
  const int64_t p = p0 + blockIdx.y;
  const int32_t e = experts[p];
  const bool bad = e < 0 || e >= n_expert;  // uniform over the block
  const bool active = o < n_ff && !bad;
  select_row<F, FA>(aq, af, p / k);
  uint8_t* slice = smem + grid_smem_bytes<F>() + (warp * gpw + gi) * slice_bytes;
  const int64_t ee = bad ? 0 : e, oo = o < n_ff ? o : 0;
  float g[1] = {0.0f}, u[1] = {0.0f};
  row_dot<F, FA, 1>(gate.data + ee * gate.expert_stride + oo * gate.row_stride, n_in, aq, af, 1, g, slice, gl, lpr,
                    active, gate.vec, grid);
  row_dot<F, FA, 1>(up.data + ee * up.expert_stride + oo * up.row_stride, n_in, aq, af, 1, u, slice, gl, lpr, active,
                    up.vec, grid);
  group_reduce<1>(g, lpr);
  group_reduce<1>(u, lpr);
  if (o < n_ff && gl == 0) {
    if (bad) {
      h[p * n_ff + o] = __int_as_float(0x7fc00000);
      return;
    }
    float gv = g[0], uv = u[0];
    if constexpr (!FA && F::kPost != 1.0f) gv = F::kPost * gv, uv = F::kPost * uv;
    h[p * n_ff + o] = swiglu_cpu(gv, uv, limit, weights[p]);  // swiglu.cuh
  }
}

// blockIdx.y = token t0 + y; block = rows of down. y[t][o] = sum over slots in slot order.
template <class F, bool FA>
__global__ void __launch_bounds__(kThreads) k_moe_down(ExpertArgs down, int64_t n_ff, int64_t n_embd, int64_t n_expert,
                                                       ActQ hq, ActF hf, const int32_t* experts, int64_t k, int64_t t0,
                                                       float* y, int lpr_log2, int slice_bytes) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const uint2* grid = setup_grid<F>(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = 1 << lpr_log2, gpw = 32 >> lpr_log2;
  const int gl = lane & (lpr - 1), gi = lane >> lpr_log2;
  const int64_t o = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * gpw + gi;
  const int64_t t = t0 + blockIdx.y;
  uint8_t* slice = smem + grid_smem_bytes<F>() + (warp * gpw + gi) * slice_bytes;
  const int64_t oo = o < n_embd ? o : 0;
  float total = 0.0f;
  bool bad = false;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t p = t * k + i;
    const int32_t e = experts[p];
    if (e < 0 || e >= n_expert) {  // uniform over the block
      bad = true;
      continue;
    }
    ActQ aq = hq;
    ActF af = hf;
    select_row<F, FA>(aq, af, p);
    float acc[1] = {0.0f};
    row_dot<F, FA, 1>(down.data + e * down.expert_stride + oo * down.row_stride, n_ff, aq, af, 1, acc, slice, gl, lpr,
                      o < n_embd, down.vec, grid);
    group_reduce<1>(acc, lpr);
    float v = acc[0];
    if constexpr (!FA && F::kPost != 1.0f) v = F::kPost * v;
    total = i == 0 ? v : total + v;
  }
  if (o < n_embd && gl == 0) y[t * n_embd + o] = bad ? __int_as_float(0x7fc00000) : total;
}

ExpertArgs expert_args(const DevExperts& x) {
  const bool vec = float_rows_vectorizable(x.first) && (x.n_expert == 1 || x.expert_stride % 16 == 0);
  return {x.first.data, x.expert_stride, x.first.row_stride, vec};
}

template <class F, bool FA>
void launch_gate_up(const DevExperts& gate, const DevExperts& up, ActQ aq, ActF af, const int32_t* experts,
                    const float* weights, int64_t pairs, int64_t k, float limit, float* h, cudaStream_t s) {
  const Geo g = geometry<F>(gate.first.n_in, "gate/up");
  const int64_t gx = (gate.first.n_out + g.rows_per_block - 1) / g.rows_per_block;
  constexpr int64_t kMaxY = 65535;
  allow_smem(reinterpret_cast<const void*>(k_moe_gate_up<F, FA>), g.smem, "moe_experts gate/up");
  for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY));
    launch(k_moe_gate_up<F, FA>, grid, kThreads, g.smem, s, expert_args(gate), expert_args(up), gate.first.n_in,
           gate.first.n_out, gate.n_expert, aq, af, experts, weights, k, p0, limit, h, g.l2, g.slice);
    check_launch("moe_experts gate/up");
  }
}

template <class F, bool FA>
void launch_down(const DevExperts& down, ActQ hq, ActF hf, const int32_t* experts, int64_t rows, int64_t k, float* y,
                 cudaStream_t s) {
  const Geo g = geometry<F>(down.first.n_in, "down");
  const int64_t gx = (down.first.n_out + g.rows_per_block - 1) / g.rows_per_block;
  constexpr int64_t kMaxY = 65535;
  allow_smem(reinterpret_cast<const void*>(k_moe_down<F, FA>), g.smem, "moe_experts down");
  for (int64_t t0 = 0; t0 < rows; t0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(rows - t0 < kMaxY ? rows - t0 : kMaxY));
    launch(k_moe_down<F, FA>, grid, kThreads, g.smem, s, expert_args(down), down.first.n_in, down.first.n_out,
           down.n_expert, hq, hf, experts, k, t0, y, g.l2, g.slice);
    check_launch("moe_experts down");
  }
}


// ---- CPU-order routed experts (gemv_exact.cuh) ---------------------------------------------

// One plan for either kind of weight format.
struct XPlan {
  QPlan q;
  FPlan f;
  int rb = 1;
  size_t smem = 0;
};

template <class F>
XPlan plan_x(int64_t n_in, int64_t n_out, int64_t pairs) {
  XPlan x;
  if constexpr (F::kFloat) {
    x.f = plan_f<F, 1>(n_in, n_out, 0, pairs);
    x.rb = x.f.rb, x.smem = x.f.smem;
  } else {
    x.q = plan_q<F, 1>(n_in, n_out, 0, pairs);
    x.rb = x.q.rb, x.smem = x.q.smem;
  }
  if (x.smem > 200 * 1024) fail("CUDA moe_experts: {} bytes of shared memory for rows of {}", x.smem, n_in);
  return x;
}

// res[j] = vec_dot of row j (of nrows at w) with activation row `row` (quantized view, or f32
// rows of `x_len` floats), F::kPost applied. Every thread calls it; ends synchronized.
template <class F>
__device__ void cta_dot1(const uint8_t* w, size_t row_stride, int64_t n_in, int nrows, ActQ aq, const float* xf,
                         int64_t row, const XPlan& pl, uint8_t* smem, float* res_out) {
  if constexpr (F::kFloat) {
    uint8_t* stage = smem;
    float* res = reinterpret_cast<float*>(stage + pl.f.rb * pl.f.slice + static_cast<size_t>(pl.f.seg_elems) * 4);
    cta_fdot<F, 1>(w, row_stride, n_in, nrows, xf + row * n_in, n_in, 1, pl.f, stage, res);
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) res_out[t] = res[t];
  } else {
    const uint2* grid = setup_grid<F>(smem);
    uint8_t* stage = smem + grid_smem_bytes<F>();
    float* csm = reinterpret_cast<float*>(stage + pl.q.rb * pl.q.slice);
    float* res = csm + pl.q.rb * (pl.q.seg_blocks > 8 ? pl.q.seg_blocks : 8);
    aq.qs += row * aq.n;
    aq.d += row * (aq.n / F::kActBE);
    if constexpr (F::kQ8K) aq.bs += row * (aq.n / 16);
    cta_qdot<F, 1>(w, row_stride, n_in, nrows, aq, 1, pl.q, stage, csm, res, grid);
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) {
      float v = res[t];
      if constexpr (F::kPost != 1.0f) v = __fmul_rn(F::kPost, v);
      res_out[t] = v;
    }
  }
  __syncthreads();
}

// blockIdx.y = pair p0 + y; block = pl.rb rows of gate and up. h[p][o] is the CPU's
// swiglu(gate . x, up . x) * weight, bit for bit (glibc expf: see cuda_util.cuh expf_ref).
template <class F>
__global__ void __launch_bounds__(kThreads, kMinBlocks) k_xmoe_gate_up(ExpertArgs gate, ExpertArgs up, int64_t n_in, int64_t n_ff,
                                                           int64_t n_expert, ActQ aq, const float* xf,
                                                           const int32_t* experts, const float* weights, int64_t k,
                                                           int64_t p0, float limit, float* h, XPlan pl) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float gv_sh[kMaxChains], uv_sh[kMaxChains];
  const int64_t p = p0 + blockIdx.y;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * pl.rb;
  const int nrows = static_cast<int>(n_ff - o0 < pl.rb ? n_ff - o0 : pl.rb);
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {  // uniform over the block: the kernel cannot throw
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) h[p * n_ff + o0 + t] = __int_as_float(0x7fc00000);
    return;
  }
  const int64_t t = p / k;
  cta_dot1<F>(gate.data + e * gate.expert_stride + o0 * gate.row_stride, gate.row_stride, n_in, nrows, aq, xf, t, pl,
              smem, gv_sh);
  cta_dot1<F>(up.data + e * up.expert_stride + o0 * up.row_stride, up.row_stride, n_in, nrows, aq, xf, t, pl, smem,
              uv_sh);
  const float wt = weights[p];
  for (int j = threadIdx.x; j < nrows; j += blockDim.x) {
    float gv = gv_sh[j], uv = uv_sh[j];
    h[p * n_ff + o0 + j] = swiglu_cpu(gv, uv, limit, wt);  // swiglu.cuh
  }
}

// blockIdx.y = pair p0 + y; out[p][o] = down_e . h[p].
template <class F>
__global__ void __launch_bounds__(kThreads, kMinBlocks) k_xmoe_down(ExpertArgs down, int64_t n_ff, int64_t n_embd, int64_t n_expert,
                                                        ActQ hq, const float* hf, const int32_t* experts, int64_t p0,
                                                        float* out, XPlan pl) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float res[kMaxChains];
  const int64_t p = p0 + blockIdx.y;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * pl.rb;
  const int nrows = static_cast<int>(n_embd - o0 < pl.rb ? n_embd - o0 : pl.rb);
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) out[p * n_embd + o0 + t] = __int_as_float(0x7fc00000);
    return;
  }
  cta_dot1<F>(down.data + e * down.expert_stride + o0 * down.row_stride, down.row_stride, n_ff, nrows, hq, hf, p, pl,
              smem, res);
  for (int j = threadIdx.x; j < nrows; j += blockDim.x) out[p * n_embd + o0 + j] = res[j];
}

// y[t][o] = 0 + out[t*k][o] + out[t*k+1][o] + ... in slot order (the CPU's sum).
__global__ void k_moe_slot_sum(const float* out, int64_t rows, int64_t k, int64_t n_embd, float* y) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n_embd) return;
  const int64_t t = i / n_embd, o = i % n_embd;
  float acc = 0.0f;
  for (int64_t s = 0; s < k; ++s) acc = __fadd_rn(acc, out[(t * k + s) * n_embd + o]);
  y[i] = acc;
}

template <class F>
void launch_xgate_up(const DevExperts& gate, const DevExperts& up, ActQ aq, const float* xf, const int32_t* experts,
                     const float* weights, int64_t pairs, int64_t k, float limit, float* h, cudaStream_t s) {
  const XPlan pl = plan_x<F>(gate.first.n_in, gate.first.n_out, pairs);
  allow_smem(reinterpret_cast<const void*>(k_xmoe_gate_up<F>), pl.smem, "moe_experts gate/up");
  const int64_t gx = (gate.first.n_out + pl.rb - 1) / pl.rb;
  constexpr int64_t kMaxY = 65535;
  for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY));
    launch(k_xmoe_gate_up<F>, grid, kThreads, pl.smem, s, expert_args(gate), expert_args(up), gate.first.n_in,
           gate.first.n_out, gate.n_expert, aq, xf, experts, weights, k, p0, limit, h, pl);
    check_launch("moe_experts gate/up (CPU order)");
  }
}

template <class F>
void launch_xdown(const DevExperts& down, ActQ hq, const float* hf, const int32_t* experts, int64_t pairs, float* out,
                  cudaStream_t s) {
  const XPlan pl = plan_x<F>(down.first.n_in, down.first.n_out, pairs);
  allow_smem(reinterpret_cast<const void*>(k_xmoe_down<F>), pl.smem, "moe_experts down");
  const int64_t gx = (down.first.n_out + pl.rb - 1) / pl.rb;
  constexpr int64_t kMaxY = 65535;
  for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY));
    launch(k_xmoe_down<F>, grid, kThreads, pl.smem, s, expert_args(down), down.first.n_in, down.first.n_out,
           down.n_expert, hq, hf, experts, p0, out, pl);
    check_launch("moe_experts down (CPU order)");
  }
}

// ---- warp-per-row routed experts (gemv_warp.cuh): the 2-bit formats ---------------------------

constexpr int kWarpRowsPerBlock = 8;

// blockIdx.y = pair p0 + y, blockIdx.z = 0 (gate) / 1 (up); warp = one row:
// gu[(p*2 + z)*n_ff + o] = the CPU's dot (kPost applied). One warp per (pair, row, matrix):
// the most independent memory streams one decode token can have.
// kSmemGrid (IQ2_XXS, DS4_CUDA_MOE_SMEM_GRID=1; measured 3% slower on the H200, so off): the block first
// copies the 2 KiB grid into shared memory, so the four lookups per lane and block are shared
// memory reads, not scattered L1 reads (ncu: the L1 was 84% busy at a fifth of the DRAM rate).
template <class W, bool kSmemGrid>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    k_wmoe_gate_up(ExpertArgs gate, ExpertArgs up, int64_t n_in, int64_t n_ff, int64_t n_expert, ActQ aq,
                   const int32_t* experts, int64_t k, int64_t p0, float* gu, const uint2* grid) {
  pdl_begin();
  __shared__ float tsm[kWarpRowsPerBlock][kWarpMaxBlocks];
  __shared__ uint2 grid_sh[kSmemGrid ? 256 : 1];
  if constexpr (kSmemGrid) {  // before any warp leaves: the whole block takes part
    static_assert(32 * kWarpRowsPerBlock == 256, "one grid entry per thread");
    grid_sh[threadIdx.x] = __ldg(grid + threadIdx.x);
    __syncthreads();
    grid = grid_sh;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + warp;
  const int64_t p = p0 + blockIdx.y;
  const int z = static_cast<int>(blockIdx.z);
  if (o >= n_ff) return;  // whole warp
  float* out = gu + (p * 2 + z) * n_ff + o;
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {  // the kernel cannot throw; NaN cannot pass for a result
    if (lane == 0) *out = __int_as_float(0x7fc00000);
    return;
  }
  const ExpertArgs& m = z == 0 ? gate : up;
  float v = warp_qdot<W, kSmemGrid>(m.data + e * m.expert_stride + o * m.row_stride, warp_act<W>(aq, p / k, 0),
                                    static_cast<int>(n_in / 256), tsm[warp], grid);
  if constexpr (W::kPost != 1.0f) v = __fmul_rn(W::kPost, v);
  if (lane == 0) *out = v;
}

// h[p][o] = swiglu(g, u, limit) * weight[p], the CPU's operations (NaN stays NaN).
__global__ void k_wmoe_swiglu(const float* gu, const float* weights, int64_t pairs, int64_t n_ff, float limit,
                              float* h) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs * n_ff) return;
  const int64_t p = i / n_ff, o = i % n_ff;
  float gv = gu[(p * 2) * n_ff + o], uv = gu[(p * 2 + 1) * n_ff + o];
  h[i] = swiglu_cpu(gv, uv, limit, weights[p]);  // swiglu.cuh
}

// The default (DS4_CUDA_MOE_PAIR=0 turns it off): blockIdx.y = pair p0 + y; warp = output row
// o of both gate and up (warp_qdot2: one activation read for the two rows), then h[p][o] =
// swiglu(g, u, limit) * weight[p] as k_wmoe_swiglu computes it, without the gu round trip or
// its launch.
template <class W, bool kSmemGrid, int kOR>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    k_wmoe_gate_up_pair(ExpertArgs gate, ExpertArgs up, int64_t n_in, int64_t n_ff, int64_t n_expert, ActQ aq,
                        const int32_t* experts, const float* weights, int64_t k, int64_t p0, float limit, float* h,
                        const uint2* grid) {
  pdl_begin();
  __shared__ float tsm[kWarpRowsPerBlock][2 * kOR * kWarpMaxBlocks];
  __shared__ uint2 grid_sh[kSmemGrid ? 256 : 1];
  if constexpr (kSmemGrid) {
    static_assert(32 * kWarpRowsPerBlock == 256, "one grid entry per thread");
    grid_sh[threadIdx.x] = __ldg(grid + threadIdx.x);
    __syncthreads();
    grid = grid_sh;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + warp) * kOR;
  const int64_t p = p0 + blockIdx.y;
  if (o0 >= n_ff) return;  // whole warp
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {
    if (lane < kOR && o0 + lane < n_ff) h[p * n_ff + o0 + lane] = __int_as_float(0x7fc00000);
    return;
  }
  // Rows past n_ff (kOR > 1 and n_ff odd) repeat the last row; their results are not stored.
  const uint8_t* rows[2 * kOR];
#pragma unroll
  for (int q = 0; q < kOR; ++q) {
    const int64_t o = o0 + q < n_ff ? o0 + q : n_ff - 1;
    rows[2 * q] = gate.data + e * gate.expert_stride + o * gate.row_stride;
    rows[2 * q + 1] = up.data + e * up.expert_stride + o * up.row_stride;
  }
  float r[2 * kOR];
  warp_qdot_rows<W, 2 * kOR, kSmemGrid>(rows, warp_act<W>(aq, p / k, 0), static_cast<int>(n_in / 256), tsm[warp],
                                        grid, r);
  if (lane != 0) return;
#pragma unroll
  for (int q = 0; q < kOR; ++q) {
    float gv = r[2 * q], uv = r[2 * q + 1];
    if constexpr (W::kPost != 1.0f) gv = __fmul_rn(W::kPost, gv), uv = __fmul_rn(W::kPost, uv);
    if (o0 + q < n_ff) h[p * n_ff + o0 + q] = swiglu_cpu(gv, uv, limit, weights[p]);  // swiglu.cuh
  }
}

// blockIdx.y = pair p0 + y; warp = one output row: out[p][o] = down_e . h[p] (kPost applied);
// k_moe_slot_sum then adds the token's slots in order.
template <class W>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock) k_wmoe_down(ExpertArgs down, int64_t n_ff, int64_t n_embd,
                                                                     int64_t n_expert, ActQ hq, const int32_t* experts,
                                                                     int64_t p0, float* out, const uint2* grid) {
  pdl_begin();
  __shared__ float tsm[kWarpRowsPerBlock][kWarpMaxBlocks];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + warp;
  const int64_t p = p0 + blockIdx.y;
  if (o >= n_embd) return;  // whole warp
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {
    if (lane == 0) out[p * n_embd + o] = __int_as_float(0x7fc00000);
    return;
  }
  float v = warp_qdot<W>(down.data + e * down.expert_stride + o * down.row_stride, warp_act<W>(hq, p, 0),
                         static_cast<int>(n_ff / 256), tsm[warp], grid);
  if constexpr (W::kPost != 1.0f) v = __fmul_rn(W::kPost, v);
  if (lane == 0) out[p * n_embd + o] = v;
}

// The down projection with the slot sum fused (the default; DS4_CUDA_MOE_DOWN_SUM=0 for the
// separate kernels): block (x, t) = token t's kDnRows output rows from o0 = x * kDnRows; warp s
// = slot s of the token (k warps): the rows of expert experts[t*k+s] against h[t*k+s]
// (warp_qdot_rows: kDnRows load streams per lane), then y[t][o] = 0 + v_0 + v_1 + ... in slot
// order, k_moe_slot_sum's sum, bit for bit. One kernel and no pairs x n_embd scratch.
constexpr int kDnRows = 4, kDnMaxSlots = 16;
template <class W>
__global__ void __launch_bounds__(32 * kDnMaxSlots)
    k_wmoe_down_sum(ExpertArgs down, int64_t n_ff, int64_t n_embd, int64_t n_expert, ActQ hq, const int32_t* experts,
                    int64_t k, float* y, const uint2* grid) {
  pdl_begin();
  __shared__ float tsm[kDnMaxSlots][kDnRows * kWarpMaxBlocks];
  __shared__ float vs[kDnMaxSlots][kDnRows];
  const int s = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kDnRows, t = blockIdx.y, p = t * k + s;
  const int32_t e = experts[p];
  if (e < 0 || e >= n_expert) {
    if (lane < kDnRows) vs[s][lane] = __int_as_float(0x7fc00000);
  } else {
    const uint8_t* rows[kDnRows];
#pragma unroll
    for (int q = 0; q < kDnRows; ++q) {
      const int64_t o = o0 + q < n_embd ? o0 + q : n_embd - 1;  // past the end: computed, not stored
      rows[q] = down.data + e * down.expert_stride + o * down.row_stride;
    }
    float r[kDnRows];
    warp_qdot_rows<W, kDnRows>(rows, warp_act<W>(hq, p, 0), static_cast<int>(n_ff / 256), tsm[s], grid, r);
    if (lane == 0) {
#pragma unroll
      for (int q = 0; q < kDnRows; ++q) vs[s][q] = W::kPost != 1.0f ? __fmul_rn(W::kPost, r[q]) : r[q];
    }
  }
  __syncthreads();
  if (threadIdx.x < kDnRows && o0 + threadIdx.x < n_embd) {
    float acc = 0.0f;
    for (int64_t q = 0; q < k; ++q) acc = __fadd_rn(acc, vs[q][threadIdx.x]);
    y[t * n_embd + o0 + threadIdx.x] = acc;
  }
}

// IQ2_XXS gate/up rows decoded by byte permutes (WarpIQ2_XXSNib), on by default since measured
// (H100: the Flash MoE op 52.2 -> 43.1 us in a graph, 8-layer decode +2.5%); DS4_CUDA_IQ2_NIB=0
// for the grid + sign-mask loads (WarpIQ2_XXS).
bool iq2_nib() {
  static const bool on = env_switch("DS4_CUDA_IQ2_NIB", true);
  return on;
}

template <class Fn>
bool with_warp_format(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::IQ2_XXS:
      if (iq2_nib())
        fn(WarpIQ2_XXSNib{});
      else
        fn(WarpIQ2_XXS{});
      return true;
    case GgmlType::Q2_K: fn(WarpQ2_K{}); return true;
    default: return false;
  }
}

bool warp_moe_applies(const DevExperts& gate, const DevExperts& down) {
  auto ok = [](GgmlType t) { return t == GgmlType::IQ2_XXS || t == GgmlType::Q2_K; };
  const int64_t n_embd = gate.first.n_in, n_ff = gate.first.n_out;
  auto fits = [](GgmlType t, int64_t n) {
    if (n % 256 != 0 || n / 256 > kWarpMaxBlocks) return false;
    const int nb = static_cast<int>(n / 256);
    return t == GgmlType::IQ2_XXS ? warp_passes<WarpIQ2_XXS>(nb) != 0 : warp_passes<WarpQ2_K>(nb) != 0;
  };
  return ok(gate.first.type) && ok(down.first.type) && fits(gate.first.type, n_embd) && fits(down.first.type, n_ff);
}

// DS4_CUDA_MOE_SMEM_GRID=1 (A/B): the IQ2_XXS gate/up kernel reads its grid from shared memory.
bool moe_smem_grid() {
  static const bool on = [] {
    const char* e = std::getenv("DS4_CUDA_MOE_SMEM_GRID");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}

// Gate and up rows in one warp with the SwiGLU fused (k_wmoe_gate_up_pair): on by default since
// measured; DS4_CUDA_MOE_PAIR=0 for A/B.
bool moe_pair() {
  static const bool on = env_switch("DS4_CUDA_MOE_PAIR", true);
  return on;
}

// Output rows per warp of the gate/up kernel (DS4_CUDA_MOE_GU_ROWS=1 or 2): 2 gives a lane four
// load streams (two rows of gate and of up) and half the warps.
int moe_gu_rows() {
  static const int n = static_cast<int>(env_int("DS4_CUDA_MOE_GU_ROWS", 2, 1, 2));
  return n;
}

// The down projection with the slot sum fused (k_wmoe_down_sum); DS4_CUDA_MOE_DOWN_SUM=0 for A/B.
bool moe_down_sum() {
  static const bool on = env_switch("DS4_CUDA_MOE_DOWN_SUM", true);
  return on;
}

// Both projections on the warp kernels; h: pairs x n_ff scratch.
void warp_moe(const DevExperts& gate, const DevExperts& up, const DevExperts& down, const float* x,
              const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit, float* h, float* y,
              cudaStream_t stream, const PreQ8K* xq) {
  const int64_t n_embd = gate.first.n_in, n_ff = gate.first.n_out, pairs = rows * k;
  const uint2* grid = iq2_grid_address();
  constexpr int64_t kMaxY = 65535;
  if (moe_pair()) {
    const bool pre = xq && rows == 1 && xq->n == n_embd;
    Scratch xbuf(pre ? 0 : act_bytes(GgmlType::Q8_K, rows, n_embd), stream);
    const ActQ aq = pre ? ActQ{xq->qs, xq->d, xq->bs, n_embd}
                        : quantize_acts(GgmlType::Q8_K, x, rows, n_embd, n_embd, xbuf.get(), stream);
    with_warp_format(gate.first.type, [&](auto w) {
      using W = decltype(w);
      auto run = [&](auto kernel, int64_t rows_per_warp) {
        const int64_t per_block = kWarpRowsPerBlock * rows_per_warp;
        const unsigned gx = static_cast<unsigned>((n_ff + per_block - 1) / per_block);
        for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
          const dim3 g(gx, static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY));
          launch(kernel, g, 32 * kWarpRowsPerBlock, 0, stream, expert_args(gate), expert_args(up), n_embd, n_ff,
                 gate.n_expert, aq, experts, weights, k, p0, limit, h, grid);
          check_launch("moe_experts gate/up + swiglu (warp row pairs)");
        }
      };
      if constexpr (std::is_same_v<W, WarpIQ2_XXSNib>) {  // global tables only
        if (moe_gu_rows() == 2)
          run(k_wmoe_gate_up_pair<W, false, 2>, 2);
        else
          run(k_wmoe_gate_up_pair<W, false, 1>, 1);
      } else {
        const bool smem_grid = std::is_same_v<W, WarpIQ2_XXS> && moe_smem_grid();
        if (moe_gu_rows() == 2)
          smem_grid ? run(k_wmoe_gate_up_pair<W, true, 2>, 2) : run(k_wmoe_gate_up_pair<W, false, 2>, 2);
        else
          smem_grid ? run(k_wmoe_gate_up_pair<W, true, 1>, 1) : run(k_wmoe_gate_up_pair<W, false, 1>, 1);
      }
    });
  } else {
    const bool pre = xq && rows == 1 && xq->n == n_embd;
    Scratch xbuf(pre ? 0 : act_bytes(GgmlType::Q8_K, rows, n_embd), stream);
    const ActQ aq = pre ? ActQ{xq->qs, xq->d, xq->bs, n_embd}
                        : quantize_acts(GgmlType::Q8_K, x, rows, n_embd, n_embd, xbuf.get(), stream);
    Scratch gub(static_cast<size_t>(pairs) * 2 * static_cast<size_t>(n_ff) * sizeof(float), stream);
    float* gu = static_cast<float*>(gub.get());
    with_warp_format(gate.first.type, [&](auto w) {
      using W = decltype(w);
      const unsigned gx = static_cast<unsigned>((n_ff + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
      for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
        const dim3 g(gx, static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY), 2);
        if constexpr (std::is_same_v<W, WarpIQ2_XXSNib>)
          launch(k_wmoe_gate_up<W, false>, g, 32 * kWarpRowsPerBlock, 0, stream, expert_args(gate), expert_args(up),
                 n_embd, n_ff, gate.n_expert, aq, experts, k, p0, gu, grid);
        else if (std::is_same_v<W, WarpIQ2_XXS> && moe_smem_grid())
          launch(k_wmoe_gate_up<W, true>, g, 32 * kWarpRowsPerBlock, 0, stream, expert_args(gate), expert_args(up),
                 n_embd, n_ff, gate.n_expert, aq, experts, k, p0, gu, grid);
        else
          launch(k_wmoe_gate_up<W, false>, g, 32 * kWarpRowsPerBlock, 0, stream, expert_args(gate), expert_args(up),
                 n_embd, n_ff, gate.n_expert, aq, experts, k, p0, gu, grid);
        check_launch("moe_experts gate/up (warp rows)");
      }
    });
    const int64_t n = pairs * n_ff;
    launch(k_wmoe_swiglu, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, gu, weights, pairs, n_ff, limit, h);
    check_launch("moe_experts swiglu (warp rows)");
  }
  Scratch hq(act_bytes(GgmlType::Q8_K, pairs, n_ff), stream);
  const ActQ haq = quantize_acts(GgmlType::Q8_K, h, pairs, n_ff, n_ff, hq.get(), stream);
  if (moe_down_sum() && k <= kDnMaxSlots && rows <= kMaxY) {
    with_warp_format(down.first.type, [&](auto w) {
      using W = decltype(w);
      const dim3 g(static_cast<unsigned>((n_embd + kDnRows - 1) / kDnRows), static_cast<unsigned>(rows));
      launch(k_wmoe_down_sum<W>, g, static_cast<unsigned>(32 * k), 0, stream, expert_args(down), n_ff, n_embd,
             down.n_expert, haq, experts, k, y, grid);
      check_launch("moe_experts down + slot sum (warp rows)");
    });
    return;
  }
  Scratch obuf(static_cast<size_t>(pairs) * static_cast<size_t>(n_embd) * sizeof(float), stream);
  float* out = static_cast<float*>(obuf.get());
  with_warp_format(down.first.type, [&](auto w) {
    using W = decltype(w);
    const unsigned gx = static_cast<unsigned>((n_embd + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
    for (int64_t p0 = 0; p0 < pairs; p0 += kMaxY) {
      const dim3 g(gx, static_cast<unsigned>(pairs - p0 < kMaxY ? pairs - p0 : kMaxY));
      launch(k_wmoe_down<W>, g, 32 * kWarpRowsPerBlock, 0, stream, expert_args(down), n_ff, n_embd, down.n_expert, haq,
             experts, p0, out, grid);
      check_launch("moe_experts down (warp rows)");
    }
  });
  const int64_t n_out = rows * n_embd;
  launch(k_moe_slot_sum, static_cast<unsigned>((n_out + 255) / 256), 256, 0, stream, out, rows, k, n_embd, y);
  check_launch("moe_experts slot sum");
}

// Calls fn(F{}) for the format of `type`.
template <class Fn>
void with_format(GgmlType type, Fn&& fn) {
  switch (type) {
    case GgmlType::F32: fn(FmtF32{}); return;
    case GgmlType::F16: fn(FmtF16{}); return;
    case GgmlType::BF16: fn(FmtBF16{}); return;
    case GgmlType::Q8_0: fn(FmtQ8_0{}); return;
    case GgmlType::Q2_K: fn(FmtQ2_K{}); return;
    case GgmlType::Q4_K: fn(FmtQ4_K{}); return;
    case GgmlType::IQ2_XXS: fn(FmtIQ2_XXS{}); return;
    default:
      if (with_ext_format(type, fn)) return;
      fail("CUDA moe_experts: weight type {} is not supported", static_cast<uint32_t>(type));
  }
}

void check_experts(const DevExperts& x, const char* what) {
  check_matrix(x.first, what);
  if (x.n_expert <= 0 || x.n_expert > INT32_MAX) fail("CUDA {}: bad expert count {}", what, x.n_expert);
  if (x.n_expert > 1 && x.expert_stride < x.first.n_out * x.first.row_stride)
    fail("CUDA {}: expert stride {} is shorter than one expert of {} rows x {} bytes", what, x.expert_stride,
         x.first.n_out, x.first.row_stride);
  if (x.expert_stride % natural_alignment(x.first.type) != 0)
    fail("CUDA {}: expert stride {} breaks the {}-byte alignment of the weights", what, x.expert_stride,
         natural_alignment(x.first.type));
}

}  // namespace
}  // namespace gemv_detail

using namespace gemv_detail;

void moe_experts(const DevExperts& gate, const DevExperts& up, const DevExperts& down, const float* x,
                 const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit, float* y,
                 bool float_acts, cudaStream_t stream, const PreQ8K* xq) {
  if (rows < 0 || k <= 0) fail("CUDA moe_experts: bad rows {} / k {}", rows, k);
  check_experts(gate, "moe_experts gate");
  check_experts(up, "moe_experts up");
  check_experts(down, "moe_experts down");
  const int64_t n_embd = gate.first.n_in, n_ff = gate.first.n_out;
  if (up.first.n_in != n_embd || up.first.n_out != n_ff || up.first.type != gate.first.type)
    fail("CUDA moe_experts: up ({} x {}) does not match gate ({} x {}) in shape or type", up.first.n_out, up.first.n_in,
         n_ff, n_embd);
  if (down.first.n_in != n_ff || down.first.n_out != n_embd)
    fail("CUDA moe_experts: down is {} x {}, expected {} x {}", down.first.n_out, down.first.n_in, n_embd, n_ff);
  if (up.n_expert != gate.n_expert || down.n_expert != gate.n_expert)
    fail("CUDA moe_experts: expert counts differ (gate {}, up {}, down {})", gate.n_expert, up.n_expert, down.n_expert);
  if (rows == 0) return;
  if (!x || !experts || !weights || !y) fail("CUDA moe_experts: null input or output pointer");
  if (gate.first.type == GgmlType::IQ2_XXS || down.first.type == GgmlType::IQ2_XXS) upload_iq2_grid();

  const int64_t pairs = rows * k;
  Scratch hbuf(static_cast<size_t>(pairs) * static_cast<size_t>(n_ff) * sizeof(float), stream);
  float* h = static_cast<float*>(hbuf.get());

  if (float_acts) {  // decoded weights against f32 activations: the per-format float kernels
    with_format(gate.first.type, [&](auto fmt) {
      using F = decltype(fmt);
      launch_gate_up<F, !F::kFloat>(gate, up, ActQ{}, ActF{x, n_embd}, experts, weights, pairs, k, limit, h, stream);
    });
    with_format(down.first.type, [&](auto fmt) {
      using F = decltype(fmt);
      launch_down<F, !F::kFloat>(down, ActQ{}, ActF{h, n_ff}, experts, rows, k, y, stream);
    });
    return;
  }

  if (mma_moe_applies(gate, up, down, rows, k)) {  // tensor cores (gemm_mma.h)
    mma_moe(gate, up, down, x, experts, weights, rows, k, limit, y, stream);
    return;
  }
  static const bool staged_only = std::getenv("DS4_CUDA_STAGED_MOE") != nullptr;  // A/B against the staged kernels
  if (warp_moe_applies(gate, down) && !staged_only) {
    warp_moe(gate, up, down, x, experts, weights, rows, k, limit, h, y, stream, xq);
    return;
  }

  with_format(gate.first.type, [&](auto fmt) {
    using F = decltype(fmt);
    if constexpr (F::kFloat) {
      launch_xgate_up<F>(gate, up, ActQ{}, x, experts, weights, pairs, k, limit, h, stream);
    } else {
      const GgmlType at = quant::vec_dot_type(gate.first.type);
      Scratch xbuf(act_bytes(at, rows, n_embd), stream);
      const ActQ aq = quantize_acts(at, x, rows, n_embd, n_embd, xbuf.get(), stream);
      launch_xgate_up<F>(gate, up, aq, x, experts, weights, pairs, k, limit, h, stream);
    }
  });

  Scratch obuf(static_cast<size_t>(pairs) * static_cast<size_t>(n_embd) * sizeof(float), stream);
  float* out = static_cast<float*>(obuf.get());
  with_format(down.first.type, [&](auto fmt) {
    using F = decltype(fmt);
    if constexpr (F::kFloat) {
      launch_xdown<F>(down, ActQ{}, h, experts, pairs, out, stream);
    } else {
      const GgmlType at = quant::vec_dot_type(down.first.type);
      Scratch hq(act_bytes(at, pairs, n_ff), stream);
      const ActQ aq = quantize_acts(at, h, pairs, n_ff, n_ff, hq.get(), stream);
      launch_xdown<F>(down, aq, h, experts, pairs, out, stream);
    }
  });
  const int64_t n_out = rows * n_embd;
  launch(k_moe_slot_sum, static_cast<unsigned>((n_out + 255) / 256), 256, 0, stream, out, rows, k, n_embd, y);
  check_launch("moe_experts slot sum");
}

}  // namespace ds4::cuda
