// Float-weight products for many activation rows on tensor cores (gemm_float.h, fgemm_tc).
//
// Why two TF32 products: an F16 or BF16 weight converted to f32 has at most 11 significant bits,
// so it is exact in TF32 (10 stored mantissa bits, f32's exponent). An f32 activation is split
// as x = hi + lo + r with hi = tf32(x), lo = tf32(x - hi): |r| <= 2^-22 |x|. Each product of two
// TF32 values has at most 22 significant bits and is exact in f32, so w*hi + w*lo misses only
// w*r and the accumulation's own roundings (f32, in the tensor cores' order, not the CPU's):
// a relative error of order 2^-22 per term, where one TF32 product (or bf16) would give 2^-11.
// The CPU's element order is NOT kept: values differ from the CPU's in the last bits.
//
// Tile: BM activation rows x 64 weight rows x 32 elements per stage, two stages of cp.async
// (both operands copied raw: f32 activations, 16-bit weights), 8 warps, each warp 32 activation
// rows x (64 / (8 / (BM / 32))) weight rows as m16n8k8 tiles. Deterministic: no atomics, every
// output is one warp's sum in a fixed order.
#include <cuda_fp16.h>

#include "compute/cuda/cuda_async.cuh"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemm_float.h"
#include "compute/cuda/gemv_internal.h"
#include "core/error.h"

namespace ds4::cuda::gemv_detail {

namespace {

constexpr int kBN = 64, kBK = 32, kThreads = 256;
constexpr int kXPad = kBK + 4;  // f32 row in shared memory: rows 4 banks apart, fragment loads conflict-free
constexpr int kWPad = kBK + 8;  // 16-bit row: 20 words, the 8 fragment rows land on distinct bank pairs

__device__ __forceinline__ uint32_t to_tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

// d += a (16x8, row) * b (8x8, col), TF32 in, f32 accumulate.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct WF16 {
  __device__ static float f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
};
struct WBF16 {
  __device__ static float f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
};

template <class W, int BM>
__global__ void __launch_bounds__(kThreads, BM == 128 ? 1 : 2) k_fgemm_tc(const uint8_t* w, size_t row_stride, int64_t n_in,
                                                       int64_t n_out, const float* x, int64_t x_stride,
                                                       int64_t rows, float* y, int64_t y_stride) {
  pdl_begin();
  constexpr int kWarpsM = BM / 32, kWarpsN = 8 / kWarpsM, kWarpN = kBN / kWarpsN, kNT = kWarpN / 8;
  static_assert(kWarpsM * kWarpsN == 8 && kNT >= 1, "8 warps of 32 rows");
  __shared__ __align__(16) float xs[2][BM][kXPad];
  __shared__ __align__(16) uint16_t ws[2][kBN][kWPad];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp % kWarpsM, wn = warp / kWarpsM;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r_tile = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t ob = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t n_kt = n_in / kBK;  // n_in % 32 == 0 (fgemm_tc_applies)

  auto load = [&](int64_t k0, int b) {
#pragma unroll
    for (int u = 0; u < BM * (kBK / 4) / kThreads; ++u) {  // 16-byte pieces of f32 activations
      const int c = static_cast<int>(threadIdx.x) + kThreads * u, r = c / (kBK / 4), j = (c % (kBK / 4)) * 4;
      const int64_t rr = r_tile + r;
      const bool in = rr < rows;
      cp_async16_zfill(smem_addr(&xs[b][r][j]), in ? x + rr * x_stride + k0 + j : x, in);
    }
    {  // 64 weight rows x 4 pieces of 8 elements: one piece per thread
      const int r = static_cast<int>(threadIdx.x) / 4, j = (static_cast<int>(threadIdx.x) % 4) * 8;
      const int64_t o = ob + r;
      const bool in = o < n_out;
      cp_async16_zfill(smem_addr(&ws[b][r][j]), in ? w + static_cast<size_t>(o) * row_stride + (k0 + j) * 2 : w, in);
    }
    cp_async_commit();
  };

  float acc[2][kNT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

  load(0, 0);
  for (int64_t kt = 0; kt < n_kt; ++kt) {
    const int b = static_cast<int>(kt & 1);
    if (kt + 1 < n_kt) {
      load((kt + 1) * kBK, b ^ 1);  // b ^ 1 was last read before the previous iteration's final barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      uint32_t ahi[2][4], alo[2][4], bw[kNT][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int m0 = wm * 32 + mt * 16;
        const float v[4] = {xs[b][m0 + g][kk + t], xs[b][m0 + g + 8][kk + t], xs[b][m0 + g][kk + t + 4],
                            xs[b][m0 + g + 8][kk + t + 4]};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ahi[mt][i] = to_tf32(v[i]);
          alo[mt][i] = to_tf32(v[i] - __uint_as_float(ahi[mt][i]));
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int n0 = wn * kWarpN + nt * 8;
        bw[nt][0] = __float_as_uint(W::f(ws[b][n0 + g][kk + t]));  // exact in TF32
        bw[nt][1] = __float_as_uint(W::f(ws[b][n0 + g][kk + t + 4]));
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mma_tf32(acc[mt][nt], ahi[mt], bw[nt]);
          mma_tf32(acc[mt][nt], alo[mt], bw[nt]);
        }
    }
    __syncthreads();
  }
  // c0: (row g, col 2t), c1: (g, 2t+1), c2: (g+8, 2t), c3: (g+8, 2t+1); rows are activation
  // rows, columns weight rows.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int64_t r = r_tile + wm * 32 + mt * 16 + g + (v >= 2 ? 8 : 0);
        const int64_t o = ob + wn * kWarpN + nt * 8 + 2 * t + (v & 1);
        if (r < rows && o < n_out) y[r * y_stride + o] = acc[mt][nt][v];
      }
}

template <class W, int BM>
void launch_tc(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
               cudaStream_t s) {
  const int64_t tiles_y = (rows + BM - 1) / BM;
  if (tiles_y > 65535) fail("CUDA matmul: {} activation rows exceed the tensor-core float GEMM's grid", rows);
  const dim3 grid(static_cast<unsigned>((w.n_out + kBN - 1) / kBN), static_cast<unsigned>(tiles_y));
  launch(k_fgemm_tc<W, BM>, grid, kThreads, 0, s, w.data, w.row_stride, w.n_in, w.n_out, x, x_stride, rows, y,
         y_stride);
  check_launch("float GEMM (tensor cores, 2 x TF32)");
}

int sm_count() {
  static const int n = [] {
    int dev = 0, c = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return c;
  }();
  return n;
}

}  // namespace

bool fgemm_tc_enabled() {
  static const bool on = env_switch("DS4_CUDA_FGEMM_TC", false);
  return on;
}

bool fgemm_tc_supports(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, int64_t group_rows) {
  return half_rows_16b_aligned(w, x, x_stride) && rows >= kFgemmTcMinRows && group_rows == 0 && w.n_out > 0 &&
         w.n_in % kBK == 0;
}

void fgemm_tc(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
              cudaStream_t s) {
  // 128-row tiles when they fill the GPU at least twice over, else 64 (the 24-output mixes and
  // the 64-output indexer weights have one column of blocks).
  const int64_t blocks128 = ((w.n_out + kBN - 1) / kBN) * ((rows + 127) / 128);
  const bool big = blocks128 >= 2 * sm_count();
  if (w.type == GgmlType::F16)
    return big ? launch_tc<WF16, 128>(w, x, x_stride, rows, y, y_stride, s)
               : launch_tc<WF16, 64>(w, x, x_stride, rows, y, y_stride, s);
  if (w.type == GgmlType::BF16)
    return big ? launch_tc<WBF16, 128>(w, x, x_stride, rows, y, y_stride, s)
               : launch_tc<WBF16, 64>(w, x, x_stride, rows, y, y_stride, s);
  fail("CUDA float GEMM (tensor cores): weight type is not F16 or BF16");
}

}  // namespace ds4::cuda::gemv_detail
