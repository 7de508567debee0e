#pragma once
// The matmul kernel template and its launcher (internal; instantiated per format family in
// gemv_mm_*.cu so that the families compile in parallel).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {
namespace {

// ---- matmul kernel -------------------------------------------------------------------------

// Block (kWarps warps) = kWarps * (32 / LPR) consecutive output rows; blockIdx.y = tile of R
// activation rows.
template <class F, bool FA, int R>
__global__ void __launch_bounds__(kThreads) k_matmul(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out,
                                                     ActQ aq, ActF af, int64_t rows, int64_t r_first, float* y,
                                                     int64_t y_stride, int lpr_log2, int slice_bytes, bool vec) {
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const uint2* grid = setup_grid<F>(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lpr = 1 << lpr_log2, gpw = 32 >> lpr_log2;
  const int gl = lane & (lpr - 1), gi = lane >> lpr_log2;
  const int64_t o = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * gpw + gi;
  const bool active = o < n_out;
  const int64_t r0 = r_first + static_cast<int64_t>(blockIdx.y) * R;
  const int nr = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  if constexpr (!F::kFloat && !FA) {
    aq.qs += r0 * aq.n;
    aq.d += r0 * (aq.n / F::kActBE);
    if constexpr (F::kQ8K) aq.bs += r0 * (aq.n / 16);
  } else {
    af.x += r0 * af.stride;
  }
  uint8_t* slice = smem + grid_smem_bytes<F>() + (warp * gpw + gi) * slice_bytes;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  row_dot<F, FA, R>(w + (active ? o : 0) * row_stride, n_in, aq, af, nr, acc, slice, gl, lpr, active, vec, grid);
  group_reduce<R>(acc, lpr);
  if (active && gl == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < nr) {
        float v = acc[r];
        if constexpr (!FA && F::kPost != 1.0f) v = F::kPost * v;  // integer dot only
        y[(r0 + r) * y_stride + o] = v;
      }
    }
  }
}

int tile_rows(int64_t rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16; }

template <class F, bool FA>
void launch_matmul(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, cudaStream_t s) {
  const Geom<F> g(w.n_in);
  const int l2 = g.l2, slice = g.slice;
  const size_t smem = g.smem;
  const int64_t rows_per_block = g.rows_per_block;
  const bool vec = F::kFloat && float_rows_vectorizable(w);
  const int R = tile_rows(rows);
  const int64_t gx = (w.n_out + rows_per_block - 1) / rows_per_block;
  if (gx > INT_MAX) fail("CUDA matmul: {} output rows is too many", w.n_out);
  const int64_t tiles = (rows + R - 1) / R;
  constexpr int64_t kMaxY = 65535;
  for (int64_t t0 = 0; t0 < tiles; t0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(tiles - t0 < kMaxY ? tiles - t0 : kMaxY));
    const int64_t r_first = t0 * R;
#define DS4_LAUNCH(RR)                                                                                        \
  k_matmul<F, FA, RR><<<grid, kThreads, smem, s>>>(w.data, w.row_stride, w.n_in, w.n_out, aq, af, rows, r_first, y, \
                                                   y_stride, l2, slice, vec)
    switch (R) {
      case 1: allow_smem(k_matmul<F, FA, 1>, smem); DS4_LAUNCH(1); break;
      case 2: allow_smem(k_matmul<F, FA, 2>, smem); DS4_LAUNCH(2); break;
      case 4: allow_smem(k_matmul<F, FA, 4>, smem); DS4_LAUNCH(4); break;
      case 8: allow_smem(k_matmul<F, FA, 8>, smem); DS4_LAUNCH(8); break;
      default: allow_smem(k_matmul<F, FA, 16>, smem); DS4_LAUNCH(16); break;
    }
#undef DS4_LAUNCH
    check_launch(FA ? "gemv matmul (float activations)" : "gemv matmul");
  }
}

}  // namespace
}  // namespace ds4::cuda::gemv_detail
