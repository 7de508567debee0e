// Register-tiled float-weight products in the CPU's order (gemm_float.h).
#include "compute/cuda/gemm_float.h"

#include "compute/cuda/cpu_order.cuh"
#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_formats.cuh"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {

namespace {

constexpr int kActRows = 16;                      // activation rows per warp (its chains: kActRows x WR)
constexpr int kWeightGroups = 4;                  // warps along the weight rows of a block
constexpr int kActGroups = 2;                     // warps along the activation rows
constexpr int kTileRows = kActRows * kActGroups;  // activation rows per block
constexpr int kSeg = 128;                         // elements of each row staged at a time
constexpr int kThreads = 256;
static_assert(kWeightGroups * kActGroups * 32 == kThreads, "8 warps");

// Block (weight tile, activation tile): warp (g, h) computes weight rows o0 + g*WR .. +WR-1
// against activation rows r_tile + h*16 .. +15. Lane L owns chain L of each of those dots: the
// elements e with e % 32 == L, in element order (fmaf(w, x, chain) as the CPU's AVX2 kernel).
// Both operands go through shared memory (weights converted to f32 there), two segments deep:
// the next segment's global loads are in flight in registers while the current one is computed,
// so the FMAs wait on shared memory only.
template <class F, int WR>
__global__ void __launch_bounds__(kThreads, WR >= 4 ? 1 : 2) k_fgemm(const uint8_t* w, size_t row_stride, int64_t n_in,
                                                       int64_t n_out, const float* x, int64_t x_stride,
                                                       int64_t rows, float* y, int64_t y_stride) {
  pdl_begin();
  constexpr int kTileW = kWeightGroups * WR;
  constexpr int kXPer = kTileRows * kSeg / kThreads, kWPer = kTileW * kSeg / kThreads;
  __shared__ float xs[2][kTileRows * kSeg];
  __shared__ float ws[2][kTileW * kSeg];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = warp % kWeightGroups, h = warp / kWeightGroups;
  const int64_t ob = static_cast<int64_t>(blockIdx.x) * kTileW;
  const int64_t r_tile = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t n_seg = (n_in + kSeg - 1) / kSeg;
  float wr[kWPer];
  // Thread t stages items t, t + 256, ...: item i is (row i / kSeg, element i % kSeg). The
  // activations go straight to shared memory (cp.async, zero-filled past the ends), the weights
  // through registers (converted to f32 on the way).
  auto load = [&](int64_t e0, int b) {
#pragma unroll
    for (int u = 0; u < kXPer; ++u) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * u, r = i / kSeg, j = i % kSeg;
      const int64_t rr = r_tile + r;
      const bool in = rr < rows && e0 + j < n_in;
      cp_async4_zfill(smem_addr(&xs[b][i]), in ? x + rr * x_stride + e0 + j : x, in);
    }
    cp_async_commit();
#pragma unroll
    for (int u = 0; u < kWPer; ++u) {
      const int i = static_cast<int>(threadIdx.x) + kThreads * u, r = i / kSeg, j = i % kSeg;
      const int64_t o = ob + r < n_out ? ob + r : n_out - 1;  // past the end: computed, not stored
      wr[u] = e0 + j < n_in ? F::elem(w + static_cast<size_t>(o) * row_stride, e0 + j) : 0.0f;
    }
  };
  auto store = [&](int b) {
#pragma unroll
    for (int u = 0; u < kWPer; ++u) ws[b][threadIdx.x + kThreads * u] = wr[u];
    cp_async_wait<0>();
  };
  float a[WR][kActRows];
#pragma unroll
  for (int k = 0; k < WR; ++k)
#pragma unroll
    for (int r = 0; r < kActRows; ++r) a[k][r] = 0.0f;
  load(0, 0);
  store(0);
  __syncthreads();
  for (int64_t sgi = 0; sgi < n_seg; ++sgi) {
    const int b = static_cast<int>(sgi & 1);
    const int64_t e0 = sgi * kSeg;
    if (sgi + 1 < n_seg) load(e0 + kSeg, b ^ 1);  // b ^ 1: last read before the previous barrier
    const int steps = static_cast<int>(n_in - e0 < kSeg ? n_in - e0 : kSeg) / 32;  // n_in % 32 == 0
    const float* xh = &xs[b][h * kActRows * kSeg];
    const float* wh = &ws[b][g * WR * kSeg];
#pragma unroll
    for (int st = 0; st < kSeg / 32; ++st) {
      if (st >= steps) break;
      const int i = st * 32 + lane;
      float wv[WR];
#pragma unroll
      for (int k = 0; k < WR; ++k) wv[k] = wh[k * kSeg + i];
#pragma unroll
      for (int r = 0; r < kActRows; ++r) {
        const float xv = xh[r * kSeg + i];
#pragma unroll
        for (int k = 0; k < WR; ++k) a[k][r] = fmaf(wv[k], xv, a[k][r]);
      }
    }
    if (sgi + 1 < n_seg) store(b ^ 1);
    __syncthreads();
  }
  const int64_t o0 = ob + g * WR;
#pragma unroll
  for (int k = 0; k < WR; ++k)
#pragma unroll
    for (int r = 0; r < kActRows; ++r) {
      const float sum = warp_fold_chains(a[k][r]);
      const int64_t rr = r_tile + h * kActRows + r;
      if (lane == 0 && o0 + k < n_out && rr < rows) y[rr * y_stride + o0 + k] = sum;
    }
}

template <class F, int WR>
void launch_fgemm_wr(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
                     int64_t tiles_y, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((w.n_out + kWeightGroups * WR - 1) / (kWeightGroups * WR)),
                  static_cast<unsigned>(tiles_y));
  launch(k_fgemm<F, WR>, grid, kThreads, 0, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows, y, y_stride);
}

template <class F>
void launch_fgemm(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
                  cudaStream_t s) {
  const int64_t tiles_y = (rows + kTileRows - 1) / kTileRows;
  if (tiles_y > 65535) fail("CUDA matmul: {} activation rows exceed the float GEMM's grid", rows);
  // 2 weight rows per warp (twice the blocks, 2 per SM, fewer idle chains in a last weight tile)
  // for every product: on the H200 (8 layers, 2K, two repeats in one call) 11,619 / 11,649 t/s
  // against 11,247 / 11,523 with it for n_out <= 64 only (4 rows per warp above). Which warp
  // computes a row never changes its sum. DS4_CUDA_FGEMM_WR2=N: 2 rows only for n_out <= N.
  static const long wr2_max = env_int("DS4_CUDA_FGEMM_WR2", 1L << 30, 0, 1L << 30);
  if (w.n_out <= wr2_max)
    launch_fgemm_wr<F, 2>(w, x, x_stride, rows, y, y_stride, tiles_y, s);
  else
    launch_fgemm_wr<F, 4>(w, x, x_stride, rows, y, y_stride, tiles_y, s);
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
