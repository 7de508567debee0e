#pragma once
// Tensor-core matmul for many activation rows (gemm_mma.cu; internal to the CUDA backend).
// On by default since it ran on the H200 (cuda_mma_check: every output equal to the CPU's;
// docs/BENCHMARKS.md): gemv.cu's matmul takes it for Q8_0 weights and at least kMmaMinRows
// activation rows, moe_experts for at least kMmaMinPairs (token, slot) pairs; DS4_CUDA_MMA=0
// turns it off (A/B).
// Host-compiler friendly (the check program tests/cuda/cuda_mma_check.cpp includes it).
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/gemv.h"

namespace ds4::cuda::gemv_detail {

struct ActQ;  // gemv_formats.cuh

constexpr int64_t kMmaMinRows = 32;  // measured: about even with the warp kernels at 32 rows, ahead from 100
// Measured with 64 experts, top 6: 2.5x slower than the warp kernels at 48 pairs, 1.2-1.3x
// faster at 240; more experts spread the pairs thinner, so the bar sits at the measured win.
constexpr int64_t kMmaMinPairs = 256;

// DS4_CUDA_MMA unset or set to a value other than "0" (read once).
bool mma_enabled();

// True when the tensor-core kernel can take this product: Q8_0 weights, rows >= kMmaMinRows,
// groups whose rows are whole tiles of 128 (group_rows 0 = one group). Ignores mma_enabled().
bool mma_supports(const DevMatrix& w, int64_t rows, int64_t group_rows);
// mma_enabled() && mma_supports(...): gemv.cu's dispatch.
bool mma_applies(const DevMatrix& w, int64_t rows, int64_t group_rows);

// y[r*y_stride + o] = the CPU's Q8_0 dot of weight row o with activation row r of aq (Q8_0,
// quantize_acts' layout, aq.n = groups * w.n_in), bit for bit; grouped rows as matmul_grouped.
void mma_matmul_q8_0(const DevMatrix& w, const ActQ& aq, int64_t rows, int64_t group_rows, float* y, int64_t y_stride,
                     cudaStream_t stream);

// matmul_grouped's contract (float_acts off) on the tensor-core kernel whatever DS4_CUDA_MMA
// says; fails when mma_supports is false. For the check program's A/B. one_slot: every term in
// one running sum (NOT the CPU's order: a timing reference for the cost of the CPU's order).
void mma_matmul(const DevMatrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                int64_t y_stride, cudaStream_t stream, bool one_slot = false);

// Routed experts (gemv.h moe_experts, float_acts off) on tensor cores (gemm_moe_mma.cu): when
// enabled, IQ2_XXS gate/up, Q2_K down, widths multiples of 256 and rows * k >= kMmaMinPairs.
bool mma_moe_applies(const DevExperts& gate, const DevExperts& up, const DevExperts& down, int64_t rows, int64_t k);
// moe_experts' contract, the CPU's values bit for bit (gemm_moe_mma.cuh).
void mma_moe(const DevExperts& gate, const DevExperts& up, const DevExperts& down, const float* x,
             const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit, float* y,
             cudaStream_t stream);

}  // namespace ds4::cuda::gemv_detail
