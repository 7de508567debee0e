#pragma once
// Host-side helpers shared by gemv.cu and gemv_moe.cu (internal to the CUDA backend).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_formats.cuh"

namespace ds4::cuda::gemv_detail {

// Throws ds4::Error "CUDA <what>: <error>" when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
// After a launch: the launch error, if any, named by the kernel.
void check_launch(const char* kernel);

// Alignment (bytes) a weight type's rows need: its blocks' widest field.
size_t natural_alignment(GgmlType t);

// Validates a weight matrix for matmul/moe (type supported, whole blocks, strides, natural
// alignment of the device pointer); `what` names it in the error.
void check_matrix(const DevMatrix& w, const char* what);

// Bytes of device scratch for `rows` activation rows of n values in act_type (Q8_0 or Q8_K),
// laid out as quantize_acts writes them (each part 256-byte aligned).
size_t act_bytes(GgmlType act_type, int64_t rows, int64_t n);
// Quantizes rows of x (row r at x + r*x_stride) into buf with the CPU's bytes
// (quant::quantize_activation_row) and returns the view of them.
ActQ quantize_acts(GgmlType act_type, const float* x, int64_t rows, int64_t n, int64_t x_stride, void* buf,
                   cudaStream_t stream);

// Lanes per row: the smallest power of two >= the row's work items, at most 32.
int lanes_per_row_log2(int64_t items);

// Opts `kernel` in to more than 48 KiB of dynamic shared memory when `bytes` needs it (once per
// kernel); fails naming `what` beyond 200 KiB.
void allow_smem(const void* kernel, size_t bytes, const char* what);

// True when a float-format row can be read as 16-byte chunks.
bool float_rows_vectorizable(const DevMatrix& w);

// Stream-ordered scratch (cudaMallocAsync / cudaFreeAsync), released when it goes out of scope.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace ds4::cuda::gemv_detail
