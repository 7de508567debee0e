#pragma once
// First CUDA pieces: device discovery and dequantization kernels for the weight formats,
// checked against the CPU codecs by tests/cuda/cuda_dequant_check (run on the GPU machine
// through scripts/device/cuda_check.sh). The CUDA backend proper grows from here.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ds4::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};

// Empty when no driver or no device is present (callers skip cleanly).
std::vector<DeviceInfo> list_devices();

// Decodes `n_rows` rows of `n_per_row` elements from host bytes `src` (ggml layout) into
// host floats `dst`, going through device memory. Supported: Q8_0, Q2_K, Q4_K and the further
// formats of gemv_formats_ext.cuh (Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q3_K, Q5_K, Q6_K, IQ4_XS, IQ1_S,
// IQ1_M, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), bit-exact with quant::dequantize_row.
// Throws ds4::Error on CUDA failures or unsupported types.
void dequantize_rows_on_device(GgmlType type, const void* src, float* dst, int64_t n_rows, int64_t n_per_row);

// Embedding lookup (compute::Backend::embed) for the further formats, which cuda::embed
// (cuda_ops.h) does not decode: X[t*copies + c] = dequantize_row(table row tokens[t]) for
// c < copies; a token outside [0, n_rows) is recorded in the device error word `err` as
// cuda::embed does. Device pointers; queued on s.
bool embed_ext_supports(GgmlType type);
void embed_ext(GgmlType type, const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
               const int32_t* tokens, int64_t rows, int copies, float* X, int* err, cudaStream_t s);

}  // namespace ds4::cuda
