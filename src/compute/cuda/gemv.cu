// CUDA matmul (gemv.h): activation quantization with the CPU's bytes, then one kernel per
// (weight format, row tile) reading each weight byte once per tile of up to 16 activation rows.
// Device-side structure: gemv_formats.cuh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "compute/cuda/block_cache.h"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_quant_act.cuh"
#include "compute/cuda/gemm_float.h"
#include "compute/cuda/gemm_mma.h"
#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_exact.cuh"
#include "compute/cuda/gemv_formats_ext.cuh"
#include "compute/cuda/gemv_internal.h"
#include "compute/cuda/gemv_warp.cuh"
#include "core/error.h"
#include "quant/quant.h"

namespace ds4::cuda {

BlockCache& block_cache() {
  static BlockCache* c = new BlockCache;  // never destroyed: backends trim it at teardown
  return *c;
}

namespace gemv_detail {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {}", what, cudaGetErrorString(e));
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA kernel {} failed to launch: {}", kernel, cudaGetErrorString(e));
}

namespace {

const char* type_name(GgmlType t) {
  auto tr = type_traits(static_cast<uint32_t>(t));
  return tr ? tr->name.data() : "unknown";
}

size_t round256(size_t v) { return (v + 255) / 256 * 256; }

// ---- activation quantization --------------------------------------------------------------

// quant::quantize_row_q8_0: one warp per 32-value block, lane j holds value j.
__global__ void __launch_bounds__(kThreads) k_quant_q8_0(const float* x, int64_t rows, int64_t n, int64_t x_stride,
                                                         int8_t* qs, float* d) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t nb = n / 32;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (blk >= rows * nb) return;  // whole warps leave together
  const int64_t r = blk / nb, b = blk % nb;
  q8_0_block_warp(x[r * x_stride + 32 * b + lane], lane, qs + r * n + 32 * b, d + blk);
}

// quant::quantize_row_q8_K: one warp per 256-value block (q8_K_block_warp).
__global__ void __launch_bounds__(kThreads) k_quant_q8_K(const float* x, int64_t rows, int64_t n, int64_t x_stride,
                                                         int8_t* qs, float* d, int16_t* bs) {
  pdl_begin();
  const int64_t nb = n / 256;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (blk >= rows * nb) return;
  const int64_t r = blk / nb, b = blk % nb;
  q8_K_block_warp(x + r * x_stride + 256 * b, threadIdx.x & 31, qs + r * n + 256 * b, d + blk, bs + blk * 16);
}

// ---- matmul kernel -------------------------------------------------------------------------

// Block (kWarps warps) = kWarps * (32 / LPR) consecutive output rows; blockIdx.y = tile of R
// activation rows.
template <class F, bool FA, int R>
__global__ void __launch_bounds__(kThreads) k_matmul(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out,
                                                     ActQ aq, ActF af, int64_t rows, int64_t r_first, float* y,
                                                     int64_t y_stride, int lpr_log2, int slice_bytes, bool vec) {
  pdl_begin();
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
        if constexpr (!FA && F::kPost != 1.0f) v = F::kPost * v;
        y[(r0 + r) * y_stride + o] = v;
      }
    }
  }
}


// ---- CPU-order matmul (gemv_exact.cuh) -----------------------------------------------------

// Block = pl.rb consecutive output rows x one tile of R activation rows (blockIdx.y). Grouped
// rows (group_rows > 0): output row o reads the activation row from element
// (o / group_rows) * n_in on (the activation row is groups * n_in long: aq.n / x_stride).
template <class F, int R>
__global__ void __launch_bounds__(kThreads, kMinBlocks) k_xmatmul(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out,
                                                      ActQ aq, int64_t rows, int64_t r_first, float* y,
                                                      int64_t y_stride, QPlan pl, int64_t group_rows) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const uint2* grid = setup_grid<F>(smem);
  uint8_t* stage = smem + grid_smem_bytes<F>();
  float* csm = reinterpret_cast<float*>(stage + pl.rb * pl.slice);
  const int csm_n = pl.rb * R * (pl.seg_blocks > 8 ? pl.seg_blocks : 8);
  float* res = csm + csm_n;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * pl.rb;
  const int nrows = static_cast<int>(n_out - o0 < pl.rb ? n_out - o0 : pl.rb);
  const int64_t r0 = r_first + static_cast<int64_t>(blockIdx.y) * R;
  const int nr = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  const int64_t col = group_rows > 0 ? (o0 / group_rows) * n_in : 0;
  aq.qs += r0 * aq.n + col;
  aq.d += (r0 * aq.n + col) / F::kActBE;
  if constexpr (F::kQ8K) aq.bs += (r0 * aq.n + col) / 16;
  cta_qdot<F, R>(w + o0 * row_stride, row_stride, n_in, nrows, aq, nr, pl, stage, csm, res, grid);
  for (int t = threadIdx.x; t < nrows * R; t += blockDim.x) {
    const int j = t / R, r = t % R;
    if (r < nr) {
      float v = res[t];
      if constexpr (F::kPost != 1.0f) v = __fmul_rn(F::kPost, v);
      y[(r0 + r) * y_stride + o0 + j] = v;
    }
  }
}

template <class F, int R>
__global__ void __launch_bounds__(kThreads, kMinBlocks) k_xfmatmul(const uint8_t* w, size_t row_stride, int64_t n_in,
                                                       int64_t n_out, const float* x, int64_t x_stride, int64_t rows,
                                                       int64_t r_first, float* y, int64_t y_stride, FPlan pl,
                                                       int64_t group_rows) {
  pdl_begin();
  extern __shared__ uint4 smem4[];
  uint8_t* stage = reinterpret_cast<uint8_t*>(smem4);
  float* res = reinterpret_cast<float*>(stage + pl.rb * pl.slice + static_cast<size_t>(R) * pl.seg_elems * 4);
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * pl.rb;
  const int nrows = static_cast<int>(n_out - o0 < pl.rb ? n_out - o0 : pl.rb);
  const int64_t r0 = r_first + static_cast<int64_t>(blockIdx.y) * R;
  const int nr = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  const int64_t col = group_rows > 0 ? (o0 / group_rows) * n_in : 0;
  cta_fdot<F, R>(w + o0 * row_stride, row_stride, n_in, nrows, x + r0 * x_stride + col, x_stride, nr, pl, stage, res);
  for (int t = threadIdx.x; t < nrows * R; t += blockDim.x) {
    const int j = t / R, r = t % R;
    if (r < nr) y[(r0 + r) * y_stride + o0 + j] = res[t];
  }
}

}  // namespace

// Opts a kernel in to up to 200 KiB of dynamic shared memory (once per kernel) when it needs
// more than the default 48 KiB, or fails naming it.
void allow_smem(const void* kernel, size_t bytes, const char* what) {
  if (bytes <= 48 * 1024) return;
  if (bytes > 200 * 1024) fail("CUDA {}: {} bytes of shared memory", what, bytes);
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(kernel)) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024),
        "cudaFuncSetAttribute (shared memory)");
  done.insert(kernel);
}

namespace {

int tile_rows_exact(int64_t rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16; }

template <class F>
void launch_xmatmul(const DevMatrix& w, ActQ aq, const float* x, int64_t x_stride, int64_t rows, float* y,
                    int64_t y_stride, int64_t group_rows, cudaStream_t s) {
  const int R = tile_rows_exact(rows);
  auto go = [&](auto rtag) {
    constexpr int RR = decltype(rtag)::value;
    const int64_t tiles = (rows + RR - 1) / RR;
    constexpr int64_t kMaxY = 65535;
    if constexpr (F::kFloat) {
      const FPlan pl = plan_f<F, RR>(w.n_in, w.n_out, group_rows);
      allow_smem(reinterpret_cast<const void*>(k_xfmatmul<F, RR>), pl.smem, "matmul (float weights)");
      const int64_t gx = (w.n_out + pl.rb - 1) / pl.rb;
      if (gx > INT_MAX) fail("CUDA matmul: {} output rows is too many", w.n_out);
      for (int64_t t0 = 0; t0 < tiles; t0 += kMaxY) {
        const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(tiles - t0 < kMaxY ? tiles - t0 : kMaxY));
        launch(k_xfmatmul<F, RR>, grid, kThreads, pl.smem, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows,
               t0 * RR, y, y_stride, pl, group_rows);
        check_launch("gemv matmul (float weights, CPU order)");
      }
    } else {
      const QPlan pl = plan_q<F, RR>(w.n_in, w.n_out, group_rows);
      if (pl.smem > 48 * 1024) fail("CUDA matmul: {} bytes of shared memory for rows of {}", pl.smem, w.n_in);
      const int64_t gx = (w.n_out + pl.rb - 1) / pl.rb;
      if (gx > INT_MAX) fail("CUDA matmul: {} output rows is too many", w.n_out);
      for (int64_t t0 = 0; t0 < tiles; t0 += kMaxY) {
        const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(tiles - t0 < kMaxY ? tiles - t0 : kMaxY));
        launch(k_xmatmul<F, RR>, grid, kThreads, pl.smem, s, w.data, w.row_stride, w.n_in, w.n_out, aq, rows, t0 * RR,
               y, y_stride, pl, group_rows);
        check_launch("gemv matmul (CPU order)");
      }
    }
  };
  switch (R) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    case 4: go(std::integral_constant<int, 4>{}); break;
    case 8: go(std::integral_constant<int, 8>{}); break;
    default: go(std::integral_constant<int, 16>{}); break;
  }
}

int tile_rows(int64_t rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16; }

template <class F, bool FA>
void launch_matmul(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, cudaStream_t s) {
  const int64_t items = F::kFloat ? (w.n_in + 7) / 8 : w.n_in / F::kBE;
  const int l2 = lanes_per_row_log2(items);
  const int gpw = 32 >> l2;
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * gpw;
  int slice = 0;
  if constexpr (!F::kFloat) slice = ((1 << l2) * F::kBB + kSliceSlack + 15) / 16 * 16;
  const size_t smem = static_cast<size_t>(grid_smem_bytes<F>()) + static_cast<size_t>(kWarps) * gpw * slice;
  if (smem > 200 * 1024) fail("CUDA matmul: {} bytes of shared memory for {} rows of {}", smem, w.n_in, type_name(w.type));
  const bool vec = F::kFloat && float_rows_vectorizable(w);
  const int R = tile_rows(rows);
  const int64_t gx = (w.n_out + rows_per_block - 1) / rows_per_block;
  if (gx > INT_MAX) fail("CUDA matmul: {} output rows is too many", w.n_out);
  const int64_t tiles = (rows + R - 1) / R;
  constexpr int64_t kMaxY = 65535;
  for (int64_t t0 = 0; t0 < tiles; t0 += kMaxY) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(tiles - t0 < kMaxY ? tiles - t0 : kMaxY));
    const int64_t r_first = t0 * R;
#define DS4_LAUNCH(RR)                                                                                               \
  allow_smem(reinterpret_cast<const void*>(k_matmul<F, FA, RR>), smem, "matmul (float activations)");                \
  launch(k_matmul<F, FA, RR>, grid, kThreads, smem, s, w.data, w.row_stride, w.n_in, w.n_out, aq, af, rows, r_first, \
         y, y_stride, l2, slice, vec)
    switch (R) {
      case 1: DS4_LAUNCH(1); break;
      case 2: DS4_LAUNCH(2); break;
      case 4: DS4_LAUNCH(4); break;
      case 8: DS4_LAUNCH(8); break;
      default: DS4_LAUNCH(16); break;
    }
#undef DS4_LAUNCH
    check_launch(FA ? "gemv matmul (float activations)" : "gemv matmul");
  }
}

}  // namespace

size_t natural_alignment(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::Q2_K:
    case GgmlType::Q4_K: return 4;
    case GgmlType::MXFP4:
    case GgmlType::IQ1_M: return 1;  // byte fields only (gemv_formats_ext.cuh reads any alignment)
    default: return 2;
  }
}

void check_matrix(const DevMatrix& w, const char* what) {
  if (!gemv_supports(w.type)) fail("CUDA {}: weight type {} is not supported", what, type_name(w.type));
  const auto& tr = traits(w.type);
  if (w.n_in <= 0 || w.n_out < 0) fail("CUDA {}: bad {} matrix shape {} x {}", what, tr.name, w.n_out, w.n_in);
  if (w.n_in % tr.block_elems != 0)
    fail("CUDA {}: row of {} elements is not a whole number of {} blocks of {}", what, w.n_in, tr.name, tr.block_elems);
  if (w.n_in > INT_MAX / 2) fail("CUDA {}: row of {} elements is too long", what, w.n_in);
  const size_t rb = row_bytes(tr, static_cast<uint64_t>(w.n_in));
  if (w.row_stride < rb) fail("CUDA {}: row stride {} is shorter than a {} row of {} bytes", what, w.row_stride, tr.name, rb);
  if (!w.data && w.n_out > 0) fail("CUDA {}: null weight pointer", what);
  const size_t al = natural_alignment(w.type);
  if (reinterpret_cast<uintptr_t>(w.data) % al != 0 || w.row_stride % al != 0)
    fail("CUDA {}: {} weights at {} with row stride {} are not {}-byte aligned", what, tr.name,
         static_cast<const void*>(w.data), w.row_stride, al);
}

int lanes_per_row_log2(int64_t items) {
  int l = 0;
  while (l < 5 && (int64_t{1} << l) < items) ++l;
  return l;
}

bool float_rows_vectorizable(const DevMatrix& w) {
  const size_t es = w.type == GgmlType::F32 ? 4 : 2;
  return reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_stride % 16 == 0 &&
         (static_cast<size_t>(w.n_in) * es) % 16 == 0;
}

size_t act_bytes(GgmlType act_type, int64_t rows, int64_t n) {
  const size_t r = static_cast<size_t>(rows), nn = static_cast<size_t>(n);
  if (act_type == GgmlType::Q8_0) return round256(r * nn) + round256(r * (nn / 32) * 4);
  if (act_type == GgmlType::Q8_1) return round256(r * nn) + round256(r * (nn / 16) * 4);  // FmtQ5_1's view
  return round256(r * nn) + round256(r * (nn / 256) * 4) + round256(r * (nn / 16) * 2);
}

ActQ quantize_acts(GgmlType act_type, const float* x, int64_t rows, int64_t n, int64_t x_stride, void* buf,
                   cudaStream_t stream) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  const size_t r = static_cast<size_t>(rows), nn = static_cast<size_t>(n);
  ActQ a;
  a.n = n;
  a.qs = reinterpret_cast<int8_t*>(p);
  if (rows == 0) return a;
  if (act_type == GgmlType::Q8_0) {
    float* d = reinterpret_cast<float*>(p + round256(r * nn));
    a.d = d;
    const int64_t blocks = rows * (n / 32);
    launch(k_quant_q8_0, static_cast<unsigned>((blocks + kWarps - 1) / kWarps), kThreads, 0, stream, x, rows, n,
           x_stride, const_cast<int8_t*>(a.qs), d);
    check_launch("gemv quantize_q8_0 (activations)");
  } else if (act_type == GgmlType::Q8_K) {
    float* d = reinterpret_cast<float*>(p + round256(r * nn));
    int16_t* bs = reinterpret_cast<int16_t*>(p + round256(r * nn) + round256(r * (nn / 256) * 4));
    a.d = d, a.bs = bs;
    const int64_t blocks = rows * (n / 256);
    launch(k_quant_q8_K, static_cast<unsigned>((blocks + kWarps - 1) / kWarps), kThreads, 0, stream, x, rows, n,
           x_stride, const_cast<int8_t*>(a.qs), d, bs);
    check_launch("gemv quantize_q8_K (activations)");
  } else if (act_type == GgmlType::Q8_1) {  // Q5_1's activations (gemv_formats_legacy.cuh)
    float* d = reinterpret_cast<float*>(p + round256(r * nn));
    a.d = d;
    quantize_acts_q8_1(x, rows, n, x_stride, const_cast<int8_t*>(a.qs), d, stream);
  } else {
    fail("CUDA gemv: {} is not an activation format", type_name(act_type));
  }
  return a;
}

Scratch::Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (!bytes) return;
  cudaError_t e = cudaSuccess;
  p_ = block_cache().get(bytes, stream, &e);
  if (!p_) check(e, "cudaMallocAsync (gemv scratch)");
}
Scratch::~Scratch() { block_cache().put(p_); }

}  // namespace gemv_detail

using namespace gemv_detail;

bool gemv_supports(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::IQ2_XXS: return true;
    default: return ext_format(type);
  }
}

namespace gemv_detail {
namespace {

// One activation row (decode): a warp per output row (gemv_warp.cuh); rows of group g read
// activation elements [g*n_in, (g+1)*n_in). tsm: 8 warps x nb floats of dynamic shared memory.
// Up to kMaxMany matrices of one format against one activation row, in one launch: blocks
// [block0[m], block0[m+1]) compute matrix m's rows, 8 per block.
constexpr int kMaxMany = 8;
struct WRows {
  int count = 0;
  int64_t group_rows = 0;  // matrix 0 only (count == 1)
  const uint8_t* data[kMaxMany] = {};
  size_t stride[kMaxMany] = {};
  int64_t n_out[kMaxMany] = {};
  float* y[kMaxMany] = {};
  int64_t block0[kMaxMany + 1] = {};
};

template <class W>
__global__ void __launch_bounds__(256) k_wmatmul(WRows R, int64_t n_in, ActQ aq, const uint2* grid) {
  pdl_begin();
  extern __shared__ float wtsm[];  // 8 warps x nb floats
  const int warp = threadIdx.x >> 5;
  int m = 0;
  while (m + 1 < R.count && blockIdx.x >= R.block0[m + 1]) ++m;
  const int64_t o = (static_cast<int64_t>(blockIdx.x) - R.block0[m]) * 8 + warp;
  if (o >= R.n_out[m]) return;  // whole warp
  const int nb = static_cast<int>(n_in / W::kBE);
  const int64_t first = R.group_rows > 0 ? o / R.group_rows * n_in : 0;
  float v = warp_qdot<W>(R.data[m] + o * R.stride[m], warp_act<W>(aq, 0, first), nb, wtsm + warp * nb, grid);
  if constexpr (W::kPost != 1.0f) v = __fmul_rn(W::kPost, v);
  if ((threadIdx.x & 31) == 0) R.y[m][o] = v;
}

// One float weight row times x by a warp, the CPU's order (dot_avx2_float.cpp: element i into
// chain i % 32, then 8-wide steps into chains 0..7, the fold, then the scalar tail), 16 steps'
// loads in flight; the result is lane 0's.
template <class F>
__device__ __forceinline__ float warp_float_dot(const uint8_t* row, const float* xr, int64_t n_in) {
  const int lane = threadIdx.x & 31;
  const int64_t n32 = n_in / 32 * 32;
  constexpr int U = 16;
  float a = 0.0f;
  int64_t i = 0;
  for (; i + 32 * U <= n32; i += 32 * U) {
    float wv[U], xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      wv[u] = F::elem(row, i + 32 * u + lane);
      xv[u] = __ldg(xr + i + 32 * u + lane);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) a = fmaf(wv[u], xv[u], a);
  }
  for (; i + 32 <= n32; i += 32) a = fmaf(F::elem(row, i + lane), __ldg(xr + i + lane), a);
  for (; i + 8 <= n_in; i += 8)
    if (lane < 8) a = fmaf(F::elem(row, i + lane), __ldg(xr + i + lane), a);
  float sum = warp_fold_chains(a);
  if (lane == 0)
    for (int64_t t = i; t < n_in; ++t) sum = __fadd_rn(sum, __fmul_rn(F::elem(row, t), __ldg(xr + t)));
  return sum;
}

// Float weights, one activation row: a warp per output row (warp_float_dot).
template <class F>
__global__ void __launch_bounds__(256) k_wfmatmul(const uint8_t* w, size_t row_stride, int64_t n_in, int64_t n_out,
                                                  const float* x, int64_t group_rows, float* y) {
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  if (o >= n_out) return;  // whole warp
  const float* xr = x + (group_rows > 0 ? o / group_rows * n_in : 0);
  const float sum = warp_float_dot<F>(w + o * row_stride, xr, n_in);
  if (lane == 0) y[o] = sum;
}

// k_wfmatmul's rows of several float matrices of one input in one launch (matmul_many: the
// compressor and indexer projections of the attention input; DS4_CUDA_FMANY=0 turns it off):
// block b belongs to the matrix m with R.block0[m] <= b < R.block0[m+1]; each row is
// warp_float_dot, so the results are k_wfmatmul's bits.
template <class F>
__global__ void __launch_bounds__(256) k_wfmatmul_many(WRows R, int64_t n_in, const float* x) {
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int m = 0;
  while (m + 1 < R.count && blockIdx.x >= R.block0[m + 1]) ++m;
  const int64_t o = (static_cast<int64_t>(blockIdx.x) - R.block0[m]) * 8 + warp;
  if (o >= R.n_out[m]) return;  // whole warp
  const float sum = warp_float_dot<F>(R.data[m] + o * R.stride[m], x, n_in);
  if (lane == 0) R.y[m][o] = sum;
}

// The rows of `count` matrices for one launch of the warp-row kernels: 8 rows (warps) per block.
WRows warp_rows(const DevMatrix* ws, float* const* ys, int count, int64_t group_rows) {
  WRows R;
  R.count = count;
  R.group_rows = group_rows;
  for (int m = 0; m < count; ++m) {
    R.data[m] = ws[m].data, R.stride[m] = ws[m].row_stride, R.n_out[m] = ws[m].n_out, R.y[m] = ys[m];
    R.block0[m + 1] = R.block0[m] + (ws[m].n_out + 7) / 8;
  }
  if (R.block0[count] > INT_MAX) fail("CUDA matmul: {} blocks is too many", R.block0[count]);
  return R;
}

template <class F>
void launch_wfmatmul_many(const DevMatrix* ws, float* const* ys, int count, const float* x, cudaStream_t s) {
  const WRows R = warp_rows(ws, ys, count, 0);
  launch(k_wfmatmul_many<F>, static_cast<unsigned>(R.block0[count]), 256, 0, s, R, ws[0].n_in, x);
  check_launch("matmul_many (float, warp rows)");
}

// One-row float products of matmul_many in one launch per weight type (on by default since
// measured: 8-layer decode +4.4% on the H100; DS4_CUDA_FMANY=0: each runs as its own matmul, the
// compressor's and indexer's 512-row F16 projections on the staged kernel).
bool float_many() {
  static const bool on = env_switch("DS4_CUDA_FMANY", true);
  return on;
}

template <class F>
void launch_wfmatmul(const DevMatrix& w, const float* x, float* y, int64_t group_rows, cudaStream_t s) {
  launch(k_wfmatmul<F>, static_cast<unsigned>((w.n_out + 7) / 8), 256, 0, s, w.data, w.row_stride, w.n_in, w.n_out, x,
         group_rows, y);
  check_launch("matmul (float, warp rows)");
}

template <class W>
void launch_wmatmul_rows(const DevMatrix* ws, float* const* ys, int count, int64_t group_rows, const ActQ& aq,
                         cudaStream_t s) {
  const int64_t n_in = ws[0].n_in, nb = n_in / W::kBE;
  const WRows R = warp_rows(ws, ys, count, group_rows);
  const size_t smem = static_cast<size_t>(8 * nb) * sizeof(float);
  allow_smem(reinterpret_cast<const void*>(k_wmatmul<W>), smem, "matmul (warp rows)");
  const uint2* grid = std::is_same_v<W, WarpIQ2_XXS> ? iq2_grid_address() : nullptr;
  launch(k_wmatmul<W>, static_cast<unsigned>(R.block0[count]), 256, smem, s, R, n_in, aq, grid);
  check_launch("matmul (warp rows)");
}

// DS4_CUDA_STAGED_GEMV (A/B): the staged kernels for one activation row too.
bool staged_gemv_only() {
  static const bool on = std::getenv("DS4_CUDA_STAGED_GEMV") != nullptr;
  return on;
}

// The one-row Q8_0 products with WarpQ8_0Wide's 4-byte loads: on by default since measured;
// DS4_CUDA_Q8_WIDE=0 for A/B.
bool q8_wide() {
  static const bool on = env_switch("DS4_CUDA_Q8_WIDE", true);
  return on;
}

// The one-row Q8_0 products of `count` matrices (warp rows), in the load variant chosen: the
// split copies when every matrix has one (the backend made them), else the file's layout.
void launch_wmatmul_q8_0(const DevMatrix* ws, float* const* ys, int count, int64_t group_rows, const ActQ& aq,
                         cudaStream_t s) {
  bool split = true;
  for (int m = 0; m < count; ++m) split = split && ws[m].q8_split != nullptr;
  if (split) {
    DevMatrix sw[kMaxMany];
    for (int m = 0; m < count; ++m) {
      sw[m] = ws[m];
      sw[m].data = ws[m].q8_split;
      sw[m].row_stride = static_cast<size_t>(ws[m].n_in / 32) * 34;
    }
    launch_wmatmul_rows<WarpQ8_0Split>(sw, ys, count, group_rows, aq, s);
  } else if (q8_wide())
    launch_wmatmul_rows<WarpQ8_0Wide>(ws, ys, count, group_rows, aq, s);
  else
    launch_wmatmul_rows<WarpQ8_0>(ws, ys, count, group_rows, aq, s);
}

template <class W>
void launch_wmatmul(const DevMatrix& w, const ActQ& aq, float* y, int64_t group_rows, cudaStream_t s) {
  launch_wmatmul_rows<W>(&w, &y, 1, group_rows, aq, s);
}

// One thread per block: the 32 quants to 32 * b (two 16-byte stores), the scale to the row's
// scale array.
__global__ void k_q8_0_split(const uint8_t* src, size_t src_stride, int64_t n_out, int64_t nb, uint8_t* dst) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_out * nb) return;
  const int64_t o = i / nb, b = i % nb;
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src + o * src_stride + b * 34);  // 2-byte aligned
  uint32_t q[8];
#pragma unroll
  for (int t = 0; t < 8; ++t) q[t] = h[1 + 2 * t] | (static_cast<uint32_t>(h[2 + 2 * t]) << 16);
  uint8_t* row = dst + o * nb * 34;
  uint4* qd = reinterpret_cast<uint4*>(row + 32 * b);
  qd[0] = make_uint4(q[0], q[1], q[2], q[3]);
  qd[1] = make_uint4(q[4], q[5], q[6], q[7]);
  reinterpret_cast<uint16_t*>(row + 32 * nb)[b] = h[0];
}

}  // namespace
}  // namespace gemv_detail

bool q8_0_splittable(const DevMatrix& w) {
  return w.type == GgmlType::Q8_0 && w.n_in > 0 && w.n_in % 256 == 0 && w.n_out > 0;
}

void q8_0_split_rows(const DevMatrix& w, uint8_t* dst, cudaStream_t stream) {
  if (!q8_0_splittable(w)) fail("CUDA q8_0 split: {} x {} {} rows cannot take the split layout", w.n_out, w.n_in,
                                type_name(w.type));
  const int64_t nb = w.n_in / 32, n = w.n_out * nb;
  launch(gemv_detail::k_q8_0_split, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, w.data, w.row_stride,
         w.n_out, nb, dst);
  gemv_detail::check_launch("q8_0 split rows");
}

void matmul(const DevMatrix& w, const float* x, int64_t rows, float* y, int64_t x_stride, int64_t y_stride,
            bool float_acts, cudaStream_t stream, const PreQ8* pre) {
  matmul_grouped(w, 1, x, rows, y, x_stride, y_stride, float_acts, stream, pre);
}

void matmul_grouped(const DevMatrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                    int64_t y_stride, bool float_acts, cudaStream_t stream, const PreQ8* pre) {
  if (rows < 0) fail("CUDA matmul: negative row count {}", rows);
  check_matrix(w, "matmul");
  if (groups < 1 || w.n_out % groups != 0)
    fail("CUDA matmul: {} rows do not split into {} groups", w.n_out, groups);
  if (rows == 0 || w.n_out == 0) return;
  if (!x || !y) fail("CUDA matmul: null activation or output pointer");
  const int64_t x_len = groups * w.n_in;  // one activation row
  if (x_stride == 0) x_stride = x_len;
  if (y_stride == 0) y_stride = w.n_out;
  if (x_stride < x_len) fail("CUDA matmul: x stride {} is shorter than a row of {}", x_stride, x_len);
  if (y_stride < w.n_out) fail("CUDA matmul: y stride {} is shorter than a row of {}", y_stride, w.n_out);
  const int64_t group_rows = groups > 1 ? w.n_out / groups : 0;
  if (w.type == GgmlType::IQ2_XXS) upload_iq2_grid();
  if (float_acts && groups > 1) {  // the float_acts kernels know no groups: one launch per group
    const int64_t gr = w.n_out / groups;
    for (int64_t g = 0; g < groups; ++g) {
      const DevMatrix wg{w.type, w.data + static_cast<size_t>(g * gr) * w.row_stride, w.n_in, gr, w.row_stride};
      matmul_grouped(wg, 1, x + g * w.n_in, rows, y + g * gr, x_stride, y_stride, true, stream);
    }
    return;
  }
  const ActF af{x, x_stride};
  const bool staged_only = staged_gemv_only();
  // Few long rows (the hyper-connection mixes: 24 x 16384) leave a warp per row latency-bound
  // on its serial chains: the staged kernel is faster there (measured on the H200).
  if (rows == 1 && !staged_only && w.n_out >= 1024) {
    switch (w.type) {
      case GgmlType::F32: launch_wfmatmul<FmtF32>(w, x, y, group_rows, stream); return;
      case GgmlType::F16: launch_wfmatmul<FmtF16>(w, x, y, group_rows, stream); return;
      case GgmlType::BF16: launch_wfmatmul<FmtBF16>(w, x, y, group_rows, stream); return;
      default: break;
    }
  }
  if (fgemm_tc_enabled() && fgemm_tc_supports(w, x, x_stride, rows, group_rows))
    return fgemm_tc(w, x, x_stride, rows, y, y_stride, stream);  // gemm_float.h
  if (fgemm_applies(w, rows, group_rows)) return fgemm(w, x, x_stride, rows, y, y_stride, stream);  // gemm_float.h
  switch (w.type) {
    case GgmlType::F32: launch_xmatmul<FmtF32>(w, ActQ{}, x, x_stride, rows, y, y_stride, group_rows, stream); return;
    case GgmlType::F16: launch_xmatmul<FmtF16>(w, ActQ{}, x, x_stride, rows, y, y_stride, group_rows, stream); return;
    case GgmlType::BF16: launch_xmatmul<FmtBF16>(w, ActQ{}, x, x_stride, rows, y, y_stride, group_rows, stream); return;
    default: break;
  }
  auto run = [&](auto fmt) {
    using F = decltype(fmt);
    if (float_acts) {
      launch_matmul<F, true>(w, ActQ{}, af, rows, y, y_stride, stream);
      return;
    }
    const GgmlType at = quant::vec_dot_type(w.type);
    if (x_len % traits(at).block_elems != 0)
      fail("CUDA matmul: activation row of {} is not a whole number of {} blocks", x_len, traits(at).name);
    const bool use_pre = pre && pre->qs && rows == 1 && at == GgmlType::Q8_0 && pre->n == x_len;
    Scratch buf(use_pre ? 0 : act_bytes(at, rows, x_len), stream);
    const ActQ aq = use_pre ? ActQ{pre->qs, pre->d, nullptr, x_len}
                            : quantize_acts(at, x, rows, x_len, x_stride, buf.get(), stream);
    if constexpr (std::is_same_v<F, FmtQ8_0>)  // tensor cores (gemm_mma.h)
      if (mma_applies(w, rows, group_rows)) return mma_matmul_q8_0(w, aq, rows, group_rows, y, y_stride, stream);
    if (rows == 1 && !staged_only) {
      const int64_t nb = w.n_in / F::kBE;
      if constexpr (std::is_same_v<F, FmtQ8_0>)
        if (warp_passes<WarpQ8_0>(static_cast<int>(nb)) != 0)
          return launch_wmatmul_q8_0(&w, &y, 1, group_rows, aq, stream);
      if constexpr (std::is_same_v<F, FmtQ2_K>)
        if (warp_passes<WarpQ2_K>(static_cast<int>(nb)) != 0) return launch_wmatmul<WarpQ2_K>(w, aq, y, group_rows, stream);
      if constexpr (std::is_same_v<F, FmtIQ2_XXS>)
        if (warp_passes<WarpIQ2_XXS>(static_cast<int>(nb)) != 0)
          return launch_wmatmul<WarpIQ2_XXS>(w, aq, y, group_rows, stream);
    }
    launch_xmatmul<F>(w, aq, x, x_stride, rows, y, y_stride, group_rows, stream);
  };
  switch (w.type) {
    case GgmlType::Q8_0: run(FmtQ8_0{}); return;
    case GgmlType::Q2_K: run(FmtQ2_K{}); return;
    case GgmlType::Q4_K: run(FmtQ4_K{}); return;
    case GgmlType::IQ2_XXS: run(FmtIQ2_XXS{}); return;
    default:
      if (with_ext_format(w.type, run)) return;
      fail("CUDA matmul: weight type {} is not supported", type_name(w.type));
  }
}

void matmul_many(const DevMatrix* ws, int count, const float* x, int64_t rows, float* const* ys, bool float_acts,
                 cudaStream_t stream, const PreQ8* pre) {
  if (count <= 0) return;
  const bool staged_only = staged_gemv_only();
  for (int i = 1; i < count; ++i)
    if (ws[i].n_in != ws[0].n_in) fail("CUDA matmul_many: matrices of {} and {} inputs", ws[0].n_in, ws[i].n_in);
  // One-row Q8_0 products that the warp kernel takes share one quantization and one launch;
  // everything else runs as its own matmul.
  std::vector<DevMatrix> q, fl[3];
  std::vector<float*> qy, fy[3];
  const bool fmany = rows == 1 && !staged_only && float_many();
  auto float_slot = [](GgmlType t) { return t == GgmlType::F32 ? 0 : t == GgmlType::F16 ? 1 : t == GgmlType::BF16 ? 2 : -1; };
  for (int i = 0; i < count; ++i) {
    const bool warp = rows == 1 && !float_acts && !staged_only && ws[i].type == GgmlType::Q8_0 && ws[i].n_out > 0 &&
                      warp_passes<WarpQ8_0>(static_cast<int>(ws[i].n_in / 32)) != 0;
    const int fs = fmany && ws[i].n_out > 0 ? float_slot(ws[i].type) : -1;
    if (warp || fs >= 0) {
      check_matrix(ws[i], "matmul");
      if (!ys[i]) fail("CUDA matmul: null output pointer");
      (warp ? q : fl[fs]).push_back(ws[i]);
      (warp ? qy : fy[fs]).push_back(ys[i]);
    } else {
      matmul(ws[i], x, rows, ys[i], 0, 0, float_acts, stream, pre);
    }
  }
  for (int t = 0; t < 3; ++t) {
    if (fl[t].empty()) continue;
    if (!x) fail("CUDA matmul: null activation pointer");
    for (size_t i0 = 0; i0 < fl[t].size(); i0 += kMaxMany) {
      const int c = static_cast<int>(std::min<size_t>(kMaxMany, fl[t].size() - i0));
      if (t == 0) launch_wfmatmul_many<FmtF32>(fl[t].data() + i0, fy[t].data() + i0, c, x, stream);
      if (t == 1) launch_wfmatmul_many<FmtF16>(fl[t].data() + i0, fy[t].data() + i0, c, x, stream);
      if (t == 2) launch_wfmatmul_many<FmtBF16>(fl[t].data() + i0, fy[t].data() + i0, c, x, stream);
    }
  }
  if (q.empty()) return;
  if (!x) fail("CUDA matmul: null activation pointer");
  const int64_t n = q[0].n_in;
  if (n % 32 != 0) fail("CUDA matmul: activation row of {} is not a whole number of q8_0 blocks", n);
  const bool use_pre = pre && pre->qs && pre->n == n;
  Scratch buf(use_pre ? 0 : act_bytes(GgmlType::Q8_0, 1, n), stream);
  const ActQ aq =
      use_pre ? ActQ{pre->qs, pre->d, nullptr, n} : quantize_acts(GgmlType::Q8_0, x, 1, n, n, buf.get(), stream);
  for (size_t i0 = 0; i0 < q.size(); i0 += kMaxMany) {
    const int c = static_cast<int>(std::min<size_t>(kMaxMany, q.size() - i0));
    launch_wmatmul_q8_0(q.data() + i0, qy.data() + i0, c, 0, aq, stream);
  }
}

}  // namespace ds4::cuda
