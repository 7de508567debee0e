#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "compute/cuda/cuda_dequant.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {}", what, cudaGetErrorString(e));
}

__device__ inline float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One thread per 32-weight block; layout {f16 d; i8 q[32]} (spec §4).
__global__ void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 34;
  const float d = h2f(blk[0] | (blk[1] << 8));
  const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
  for (int i = 0; i < 32; ++i) dst[b * 32 + i] = d * q[i];
}

// One thread per 256-weight super-block; {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}.
__global__ void dequant_q2_K(const uint8_t* src, float* dst, int64_t n_blocks) {
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

}  // namespace

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
    default:
      cudaFree(d_src);
      cudaFree(d_dst);
      fail("dequantize_rows_on_device: type {} not supported on CUDA yet", tr.name);
  }
  check(cudaGetLastError(), "kernel launch");
  check(cudaMemcpy(dst, d_dst, out_bytes, cudaMemcpyDeviceToHost), "copy to host");
  cudaFree(d_src);
  cudaFree(d_dst);
}

}  // namespace ds4::cuda
