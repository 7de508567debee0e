#pragma once
// Host-side helpers shared by gemv.cu and gemv_moe.cu (internal to the CUDA backend).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_formats.cuh"
#include "core/error.h"

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

// True when a float-format row can be read as 16-byte chunks.
bool float_rows_vectorizable(const DevMatrix& w);

// The per-family matmul launchers (gemv_mm_*.cu) and the dispatch over them (gemv.cu).
void matmul_float(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                  cudaStream_t s);
void matmul_q8_0(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                 cudaStream_t s);
void matmul_kquant(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                   cudaStream_t s);
void matmul_iq2_xxs(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                    cudaStream_t s);
inline void matmul_launch(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride,
                          bool float_acts, cudaStream_t s) {
  switch (w.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: matmul_float(w, aq, af, rows, y, y_stride, false, s); return;
    case GgmlType::Q8_0: matmul_q8_0(w, aq, af, rows, y, y_stride, float_acts, s); return;
    case GgmlType::Q2_K:
    case GgmlType::Q4_K: matmul_kquant(w, aq, af, rows, y, y_stride, float_acts, s); return;
    case GgmlType::IQ2_XXS: matmul_iq2_xxs(w, aq, af, rows, y, y_stride, float_acts, s); return;
    default: fail("CUDA matmul: weight type id {} is not supported", static_cast<uint32_t>(w.type));
  }
}

// Lets `kernel` use `bytes` of dynamic shared memory (above 48 KiB needs an opt-in per kernel).
template <class Kernel>
void allow_smem(Kernel* kernel, size_t bytes) {
  if (bytes > 227 * 1024) fail("CUDA gemv: {} bytes of shared memory per block is more than sm_90 has", bytes);
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "cudaFuncSetAttribute (gemv shared memory)");
}

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
