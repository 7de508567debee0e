// Register-tiled float-weight products in the CPU's order (gemm_float.h).
#include "compute/cuda/gemm_float.h"

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_formats.cuh"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {

namespace {

constexpr int kActRows = 16;                  // activation rows per warp (its chains: kActRows x WR)
constexpr int kWeightGroups = 4;              // warps along the weight rows of a block
constexpr int kActGroups = 2;                 // warps along the activation rows
constexpr int kTileRows = kActRows * kActGroups;  // activation rows per block
constexpr int kSeg = 256;                     // elements of each activation row staged at a time
static_assert(kWeightGroups * kActGroups * 32 == 256, "8 warps");

// Block (weight tile, activation tile): warp (g, h) computes weight rows o0 + g*WR .. +WR-1
// against activation rows r0 + h*16 .. +15. Lane L owns chain L of each of those dots: the
// elements e with e % 32 == L, in element order (fmaf(w, x, chain) as the CPU's AVX2 kernel).
template <class F, int WR>
__global__ void __launch_bounds__(256, 2) k_fgemm(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out,
                                                  const float* x, int64_t x_stride, int64_t rows, float* y,
                                                  int64_t y_stride) {
  pdl_begin();
  __shared__ float xs[kTileRows][kSeg];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = warp % kWeightGroups, h = warp / kWeightGroups;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * (kWeightGroups * WR) + g * WR;
  const int64_t r_tile = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const uint8_t* wr[WR];
#pragma unroll
  for (int k = 0; k < WR; ++k) wr[k] = w + (o0 + k < n_out ? o0 + k : n_out - 1) * row_stride;
  float a[WR][kActRows];
#pragma unroll
  for (int k = 0; k < WR; ++k)
#pragma unroll
    for (int r = 0; r < kActRows; ++r) a[k][r] = 0.0f;
  for (int64_t e0 = 0; e0 < n_in; e0 += kSeg) {
    const int ne = static_cast<int>(n_in - e0 < kSeg ? n_in - e0 : kSeg);  // a multiple of 32
    __syncthreads();  // the previous segment is consumed
    for (int i = threadIdx.x; i < kTileRows * kSeg; i += blockDim.x) {
      const int r = i / kSeg, j = i % kSeg;
      const int64_t rr = r_tile + r;
      xs[r][j] = (rr < rows && j < ne) ? __ldg(x + rr * x_stride + e0 + j) : 0.0f;
    }
    __syncthreads();
    const float* xh = &xs[h * kActRows][0];
    for (int i = lane; i < ne; i += 32) {
      float wv[WR];
#pragma unroll
      for (int k = 0; k < WR; ++k) wv[k] = F::elem(wr[k], e0 + i);
#pragma unroll
      for (int r = 0; r < kActRows; ++r) {
        const float xv = xh[r * kSeg + i];
#pragma unroll
        for (int k = 0; k < WR; ++k) a[k][r] = fmaf(wv[k], xv, a[k][r]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < WR; ++k)
#pragma unroll
    for (int r = 0; r < kActRows; ++r) {
      const float sum = warp_fold_chains(a[k][r]);
      const int64_t rr = r_tile + h * kActRows + r;
      if (lane == 0 && o0 + k < n_out && rr < rows) y[rr * y_stride + o0 + k] = sum;
    }
}

template <class F>
void launch_fgemm(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
                  cudaStream_t s) {
  const int64_t tiles_y = (rows + kTileRows - 1) / kTileRows;
  if (tiles_y > 65535) fail("CUDA matmul: {} activation rows exceed the float GEMM's grid", rows);
  // Narrow products (the 24-row hyper-connection mixes) take 2 weight rows per warp: fewer idle
  // chains in the last weight tile.
  if (w.n_out <= 64) {
    const dim3 grid(static_cast<unsigned>((w.n_out + kWeightGroups * 2 - 1) / (kWeightGroups * 2)),
                    static_cast<unsigned>(tiles_y));
    launch(k_fgemm<F, 2>, grid, 256, 0, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows, y, y_stride);
  } else {
    const dim3 grid(static_cast<unsigned>((w.n_out + kWeightGroups * 4 - 1) / (kWeightGroups * 4)),
                    static_cast<unsigned>(tiles_y));
    launch(k_fgemm<F, 4>, grid, 256, 0, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows, y, y_stride);
  }
  check_launch("float GEMM (CPU order)");
}

}  // namespace

bool fgemm_applies(const DevMatrix& w, int64_t rows, int64_t group_rows) {
  static const bool on = env_switch("DS4_CUDA_FGEMM", true);
  const bool is_float = w.type == GgmlType::F32 || w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  return on && is_float && rows >= kFgemmMinRows && w.n_in % 32 == 0 && group_rows == 0 && w.n_out > 0;
}

void fgemm(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
           cudaStream_t s) {
  switch (w.type) {
    case GgmlType::F32: return launch_fgemm<FmtF32>(w, x, x_stride, rows, y, y_stride, s);
    case GgmlType::F16: return launch_fgemm<FmtF16>(w, x, x_stride, rows, y, y_stride, s);
    case GgmlType::BF16: return launch_fgemm<FmtBF16>(w, x, x_stride, rows, y, y_stride, s);
    default: fail("CUDA float GEMM: weight type is not a float type");
  }
}

}  // namespace ds4::cuda::gemv_detail
