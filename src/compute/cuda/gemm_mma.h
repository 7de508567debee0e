#pragma once
// Tensor-core matmul for many activation rows (gemm_mma.cu; internal to the CUDA backend).
// Opt-in while it has not run on a GPU: DS4_CUDA_MMA=1 selects it in gemv.cu's matmul for
// Q8_0 weights and at least kMmaMinRows activation rows; otherwise nothing changes.
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/gemv.h"
#include "compute/cuda/gemv_formats.cuh"

namespace ds4::cuda::gemv_detail {

constexpr int64_t kMmaMinRows = 32;

// DS4_CUDA_MMA set to a value other than "0" (read once).
bool mma_enabled();

// True when mma_matmul_q8_0 takes this product: enabled, Q8_0 weights, rows >= kMmaMinRows,
// groups whose rows are whole tiles of 128 (group_rows 0 = one group).
bool mma_applies(const DevMatrix& w, int64_t rows, int64_t group_rows);

// y[r*y_stride + o] = the CPU's Q8_0 dot of weight row o with activation row r of aq (Q8_0,
// quantize_acts' layout, aq.n = groups * w.n_in), bit for bit; grouped rows as matmul_grouped.
void mma_matmul_q8_0(const DevMatrix& w, const ActQ& aq, int64_t rows, int64_t group_rows, float* y, int64_t y_stride,
                     cudaStream_t stream);

}  // namespace ds4::cuda::gemv_detail
