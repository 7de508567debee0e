#pragma once
// First CUDA pieces: device discovery and dequantization kernels for the weight formats,
// checked against the CPU codecs by tests/cuda/cuda_dequant_check (run on the GPU machine
// through scripts/device/cuda_check.sh). The CUDA backend proper grows from here.
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
// host floats `dst`, going through device memory. Supported: Q8_0, Q2_K, Q4_K.
// Throws ds4::Error on CUDA failures or unsupported types.
void dequantize_rows_on_device(GgmlType type, const void* src, float* dst, int64_t n_rows, int64_t n_per_row);

}  // namespace ds4::cuda
