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

// ---- v2 (the default; DS4_CUDA_FGEMM_V2=0 for v1): a lane holds its chain of 8 activation rows x 8 weight rows ----
// The same chains as k_fgemm (lane L: the elements e with e % 32 == L, in element order,
// fmaf(w, x, chain)) and the same fold, so the same bits; what changes is the reuse. k_fgemm's
// lane loads 16 activations and 2 weights per 32 FMAs (2.25 bytes of shared memory per FMA:
// bound by the shared-memory port at under half the FMA rate; 7.7 TFLOP/s measured on the
// H100); here 8 + 8 loads feed 64 FMAs (1 byte per FMA). 16 warps = 32 activation rows x 32
// weight rows per block, 256-element segments two stages deep (the activations by cp.async,
// the 16-bit weights converted to f32 on the way), so one segment's loads are in flight while
// the previous one is computed. The 32 chains of an output are folded through shared memory
// (the staging buffers, reused) by one lane each, in warp_fold_chains' order.
constexpr int kV2Rows = 8, kV2W = 8, kV2WarpsA = 4, kV2WarpsW = 4;
constexpr int kV2Threads = 32 * kV2WarpsA * kV2WarpsW;
constexpr int kV2TileA = kV2Rows * kV2WarpsA, kV2TileW = kV2W * kV2WarpsW;
constexpr int kV2Seg = 256;
constexpr int kV2StageFloats = (kV2TileA + kV2TileW) * kV2Seg;
constexpr size_t kV2Smem = 2 * kV2StageFloats * sizeof(float);  // 128 KiB
static_assert(kV2WarpsA * kV2WarpsW * 32 * 33 <= 2 * kV2StageFloats, "the fold's buffers fit the stages");

template <class F>
__global__ void __launch_bounds__(kV2Threads, 1) k_fgemm2(const uint8_t* w, size_t row_stride, int64_t n_in,
                                                          int64_t n_out, const float* x, int64_t x_stride,
                                                          int64_t rows, float* y, int64_t y_stride) {
  static_assert(F::kES == 2, "16-bit weights");
  pdl_begin();
  extern __shared__ float4 v2_smem[];
  float* sm = reinterpret_cast<float*>(v2_smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ga = warp % kV2WarpsA, gw = warp / kV2WarpsA;
  const int64_t ob = static_cast<int64_t>(blockIdx.x) * kV2TileW;
  const int64_t r_tile = static_cast<int64_t>(blockIdx.y) * kV2TileA;
  const int64_t n_seg = (n_in + kV2Seg - 1) / kV2Seg;
  constexpr int kXPieces = kV2TileA * kV2Seg / 4 / kV2Threads;  // 16-byte pieces of f32 per thread
  constexpr int kWPieces = kV2TileW * kV2Seg / 8 / kV2Threads;  // 16-byte pieces of 8 weights
  uint4 wr[kWPieces];
  auto xs = [&](int b) { return sm + b * kV2StageFloats; };                      // [32 rows][kV2Seg]
  auto ws = [&](int b) { return sm + b * kV2StageFloats + kV2TileA * kV2Seg; };  // [32 rows][kV2Seg]
  auto load_x = [&](int64_t e0, int b) {
#pragma unroll
    for (int u = 0; u < kXPieces; ++u) {
      const int p = static_cast<int>(threadIdx.x) + kV2Threads * u, r = p / (kV2Seg / 4), j = (p % (kV2Seg / 4)) * 4;
      const int64_t rr = r_tile + r;
      const bool in = rr < rows && e0 + j < n_in;
      cp_async16_zfill(smem_addr(xs(b) + r * kV2Seg + j), in ? x + rr * x_stride + e0 + j : x, in);
    }
    cp_async_commit();
  };
  auto load_w = [&](int64_t e0) {
#pragma unroll
    for (int u = 0; u < kWPieces; ++u) {
      const int p = static_cast<int>(threadIdx.x) + kV2Threads * u, r = p / (kV2Seg / 8), j = (p % (kV2Seg / 8)) * 8;
      const int64_t o = ob + r < n_out ? ob + r : n_out - 1;  // past the end: computed, not stored
      wr[u] = e0 + j < n_in ? __ldg(reinterpret_cast<const uint4*>(w + static_cast<size_t>(o) * row_stride) + (e0 + j) / 8)
                            : make_uint4(0, 0, 0, 0);
    }
  };
  auto store_w = [&](int b) {
#pragma unroll
    for (int u = 0; u < kWPieces; ++u) {
      const int p = static_cast<int>(threadIdx.x) + kV2Threads * u, r = p / (kV2Seg / 8), j = (p % (kV2Seg / 8)) * 8;
      float f[8];
      F::chunk(wr[u], f);
      float4* d = reinterpret_cast<float4*>(ws(b) + r * kV2Seg + j);
      d[0] = make_float4(f[0], f[1], f[2], f[3]);
      d[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
  };
  float a[kV2W][kV2Rows];
#pragma unroll
  for (int k = 0; k < kV2W; ++k)
#pragma unroll
    for (int r = 0; r < kV2Rows; ++r) a[k][r] = 0.0f;
  load_x(0, 0);
  load_w(0);
  store_w(0);
  cp_async_wait<0>();
  __syncthreads();
  for (int64_t sgi = 0; sgi < n_seg; ++sgi) {
    const int b = static_cast<int>(sgi & 1);
    const int64_t e0 = sgi * kV2Seg;
    if (sgi + 1 < n_seg) {  // b ^ 1 was last read before the previous iteration's final barrier
      load_x(e0 + kV2Seg, b ^ 1);
      load_w(e0 + kV2Seg);
    }
    const int steps = static_cast<int>(n_in - e0 < kV2Seg ? n_in - e0 : kV2Seg) / 32;  // n_in % 32 == 0
    const float* xh = xs(b) + ga * kV2Rows * kV2Seg;
    const float* wh = ws(b) + gw * kV2W * kV2Seg;
#pragma unroll
    for (int st = 0; st < kV2Seg / 32; ++st) {
      if (st >= steps) break;
      const int i = st * 32 + lane;
      float wv[kV2W], xv[kV2Rows];
#pragma unroll
      for (int k = 0; k < kV2W; ++k) wv[k] = wh[k * kV2Seg + i];
#pragma unroll
      for (int r = 0; r < kV2Rows; ++r) xv[r] = xh[r * kV2Seg + i];
#pragma unroll
      for (int k = 0; k < kV2W; ++k)
#pragma unroll
        for (int r = 0; r < kV2Rows; ++r) a[k][r] = fmaf(wv[k], xv[r], a[k][r]);
    }
    if (sgi + 1 < n_seg) {
      store_w(b ^ 1);
      cp_async_wait<0>();
    }
    __syncthreads();
  }
  // The fold, 32 outputs of the warp at a time: lane L writes its chain of each, then folds
  // output L's 32 chains (the stages are free: every warp passed the last barrier).
  float* red = sm + warp * 32 * 33;
#pragma unroll
  for (int half = 0; half < kV2W / 4; ++half) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r = 0; r < kV2Rows; ++r) red[(kk * kV2Rows + r) * 33 + lane] = a[4 * half + kk][r];
    __syncwarp();
    const float* c = red + lane * 33;
    float v[8];
#pragma unroll
    for (int l = 0; l < 8; ++l) v[l] = __fadd_rn(__fadd_rn(c[l], c[l + 8]), __fadd_rn(c[l + 16], c[l + 24]));
    const float sum = fold8(v);
    const int64_t o = ob + gw * kV2W + 4 * half + lane / kV2Rows, rr = r_tile + ga * kV2Rows + lane % kV2Rows;
    if (o < n_out && rr < rows) y[rr * y_stride + o] = sum;
    __syncwarp();
  }
}

template <class F>
void launch_fgemm2(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
                   cudaStream_t s) {
  const int64_t tiles_y = (rows + kV2TileA - 1) / kV2TileA;
  if (tiles_y > 65535) fail("CUDA matmul: {} activation rows exceed the float GEMM's grid", rows);
  allow_smem(reinterpret_cast<const void*>(k_fgemm2<F>), kV2Smem, "float GEMM (8 x 8 chains per lane)");
  const dim3 grid(static_cast<unsigned>((w.n_out + kV2TileW - 1) / kV2TileW), static_cast<unsigned>(tiles_y));
  launch(k_fgemm2<F>, grid, kV2Threads, kV2Smem, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows, y,
         y_stride);
  check_launch("float GEMM (CPU order, 8 x 8 chains per lane)");
}

}  // namespace

// On by default since run on the H100 (2026-12-07): every output equal to k_fgemm's in 36 cases,
// 2.7-3.7x faster at 2,048 rows (1.4-1.5x at 64 rows), parity 0 everywhere, 34-layer 8K prefill
// 1.22x. DS4_CUDA_FGEMM_V2=0 for A/B.
bool fgemm_v2_enabled() {
  static const bool on = env_switch("DS4_CUDA_FGEMM_V2", true);
  return on;
}

bool fgemm_applies(const DevMatrix& w, int64_t rows, int64_t group_rows) {
  static const bool on = env_switch("DS4_CUDA_FGEMM", true);
  const bool is_float = w.type == GgmlType::F32 || w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  return on && is_float && rows >= kFgemmMinRows && w.n_in % 32 == 0 && group_rows == 0 && w.n_out > 0;
}

void fgemm(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
           cudaStream_t s, int variant) {
  const bool v2 = variant == 2 || (variant == 0 && fgemm_v2_enabled());
  if (v2 && half_rows_16b_aligned(w, x, x_stride)) {
    if (w.type == GgmlType::F16) return launch_fgemm2<FmtF16>(w, x, x_stride, rows, y, y_stride, s);
    return launch_fgemm2<FmtBF16>(w, x, x_stride, rows, y, y_stride, s);
  }
  if (variant == 2) fail("CUDA float GEMM v2: F16/BF16 weights and 16-byte aligned rows only");
  switch (w.type) {
    case GgmlType::F32: return launch_fgemm<FmtF32>(w, x, x_stride, rows, y, y_stride, s);
    case GgmlType::F16: return launch_fgemm<FmtF16>(w, x, x_stride, rows, y, y_stride, s);
    case GgmlType::BF16: return launch_fgemm<FmtBF16>(w, x, x_stride, rows, y, y_stride, s);
    default: fail("CUDA float GEMM: weight type is not a float type");
  }
}

}  // namespace ds4::cuda::gemv_detail
