#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "compute/cuda/cuda_dequant.h"
#include "compute/cuda/cuda_launch.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/cuda_util.cuh"
#include "compute/cuda/gemv_formats_ext.cuh"
#include "core/error.h"

namespace ds4::cuda {
namespace {

// check() / check_launch(): cuda_ops.h.

__device__ inline float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One thread per 32-weight block; layout {f16 d; i8 q[32]} (spec §4).
__global__ void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  pdl_begin();
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 34;
  const float d = h2f(blk[0] | (blk[1] << 8));
  const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
  for (int i = 0; i < 32; ++i) dst[b * 32 + i] = d * q[i];
}

// One thread per 256-weight super-block; {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}.
__global__ void dequant_q2_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  pdl_begin();
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 84;
  const uint8_t* scales = blk;
  const uint8_t* qs = blk + 16;
  const float d = h2f(blk[80] | (blk[81] << 8));
  const float dmin = h2f(blk[82] | (blk[83] << 8));
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, w = i % 128, s = w / 32, t = w % 32;
    const int q = (qs[32 * h + t] >> (2 * s)) & 3;
    const uint8_t sc = scales[8 * h + 2 * s + (t >= 16)];
    // Two rounded products, as the CPU reference computes them (dl*q - ml), not one fused op.
    const float dl = d * (sc & 15), ml = dmin * (sc >> 4);
    dst[b * 256 + i] = __fsub_rn(__fmul_rn(dl, (float)q), ml);
  }
}

// One thread per 256-weight super-block; {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}.
__global__ void dequant_q4_K(const uint8_t* src, float* dst, int64_t n_blocks) {
  pdl_begin();
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 144;
  const float d = h2f(blk[0] | (blk[1] << 8));
  const float dmin = h2f(blk[2] | (blk[3] << 8));
  const uint8_t* sc = blk + 4;
  const uint8_t* qs = blk + 16;
  for (int j = 0; j < 8; ++j) {
    int s, m;
    if (j < 4) {
      s = sc[j] & 63;
      m = sc[j + 4] & 63;
    } else {
      s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
      m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    const float dl = __fmul_rn(d, (float)s), ml = __fmul_rn(dmin, (float)m);
    const int c = j / 2, hi = j % 2;
    for (int t = 0; t < 32; ++t) {
      const uint8_t byte = qs[32 * c + t];
      const int q = hi ? (byte >> 4) : (byte & 15);
      dst[b * 256 + j * 32 + t] = __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
  }
}

// The further formats (gemv_formats_ext.cuh): one thread per 32-weight group, the decoders the
// float_acts GEMV path uses.
template <class F>
__global__ void dequant_ext(const uint8_t* src, float* dst, int64_t n_groups) {
  pdl_begin();
  const int64_t gi = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (gi >= n_groups) return;
  constexpr int kG = F::kBE / 32;
  float v[32];
  F::decode32(src + (gi / kG) * F::kBB, static_cast<int>(gi % kG), v);
  for (int t = 0; t < 32; ++t) dst[gi * 32 + t] = v[t];
}

// Embedding rows of the further formats: one block per token, as k_embed (cuda_ops_misc.cu).
template <class F>
__global__ void embed_ext_rows(const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
                               const int32_t* tokens, int copies, float* X, int* err) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int32_t tok = tokens[t];
  if (tok < 0 || tok >= n_rows) {
    if (threadIdx.x == 0 && atomicCAS(err, 0, kErrEmbedToken) == 0) err[1] = tok;
    return;
  }
  const uint8_t* row = table + static_cast<size_t>(tok) * row_stride;
  float* x0 = X + t * copies * n_in;
  constexpr int kG = F::kBE / 32;
  for (int64_t gi = threadIdx.x; gi < n_in / 32; gi += blockDim.x) {
    float v[32];
    F::decode32(row + (gi / kG) * F::kBB, static_cast<int>(gi % kG), v);
    for (int c = 0; c < copies; ++c)
      for (int j = 0; j < 32; ++j) x0[c * n_in + 32 * gi + j] = v[j];
  }
}

}  // namespace

bool embed_ext_supports(GgmlType type) { return gemv_detail::ext_format(type); }

void embed_ext(GgmlType type, const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
               const int32_t* tokens, int64_t rows, int copies, float* X, int* err, cudaStream_t s) {
  if (rows <= 0) return;
  const bool ok = gemv_detail::with_ext_format(type, [&](auto fmt) {
    using F = decltype(fmt);
    if (n_in % F::kBE != 0) fail("CUDA embed: row of {} is not whole {} blocks", n_in, traits(type).name);
    launch(embed_ext_rows<F>, static_cast<unsigned>(rows), 128, 0, s, table, n_in, n_rows, row_stride, tokens, copies,
           X, err);
    check_launch("embed (further formats)");
  });
  if (!ok) fail("CUDA embed: table type {} is not supported", traits(type).name);
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem, (size_t)p.l2CacheSize});
  }
  return out;
}

void dequantize_rows_on_device(GgmlType type, const void* src, float* dst, int64_t n_rows, int64_t n_per_row) {
  const auto& tr = traits(type);
  if (n_per_row % tr.block_elems != 0) fail("dequantize_rows_on_device: row of {} is not whole {} blocks", n_per_row, tr.name);
  const int64_t n_blocks = n_rows * (n_per_row / tr.block_elems);
  const size_t in_bytes = static_cast<size_t>(n_blocks) * tr.block_bytes;
  const size_t out_bytes = static_cast<size_t>(n_rows * n_per_row) * sizeof(float);
  uint8_t* d_src = nullptr;
  float* d_dst = nullptr;
  check(cudaMalloc(&d_src, in_bytes), "cudaMalloc(src)");
  check(cudaMalloc(&d_dst, out_bytes), "cudaMalloc(dst)");
  check(cudaMemcpy(d_src, src, in_bytes, cudaMemcpyHostToDevice), "copy to device");
  const int threads = 128;
  const int grid = static_cast<int>((n_blocks + threads - 1) / threads);
  switch (type) {
    case GgmlType::Q8_0: dequant_q8_0<<<grid, threads>>>(d_src, d_dst, n_blocks); break;
    case GgmlType::Q2_K: dequant_q2_K<<<grid, threads>>>(d_src, d_dst, n_blocks); break;
    case GgmlType::Q4_K: dequant_q4_K<<<grid, threads>>>(d_src, d_dst, n_blocks); break;
    default: {
      bool ok = false;
      try {
        ok = gemv_detail::with_ext_format(type, [&](auto fmt) {
          using F = decltype(fmt);
          const int64_t n_groups = n_blocks * (F::kBE / 32);
          dequant_ext<F><<<static_cast<unsigned>((n_groups + threads - 1) / threads), threads>>>(d_src, d_dst, n_groups);
        });
      } catch (...) {
        cudaFree(d_src);
        cudaFree(d_dst);
        throw;
      }
      if (!ok) {
        cudaFree(d_src);
        cudaFree(d_dst);
        fail("dequantize_rows_on_device: type {} not supported on CUDA yet", tr.name);
      }
    }
  }
  check(cudaGetLastError(), "kernel launch");
  check(cudaMemcpy(dst, d_dst, out_bytes, cudaMemcpyDeviceToHost), "copy to host");
  cudaFree(d_src);
  cudaFree(d_dst);
}

}  // namespace ds4::cuda
