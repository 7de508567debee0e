#pragma once
// Float-weight (F32 / F16 / BF16) products for many activation rows (gemm_float.cu; internal to
// the CUDA backend): the prefill's compressor and indexer projections and hyper-connection
// mixes. Register-tiled: a warp holds the FMA chains of 16 activation rows x WR weight rows,
// so a weight element loaded once serves 16 rows and a staged activation element WR rows
// (gemv.cu's staged kernel loads one activation element per FMA); both operands are staged in
// shared memory, the next segment's loads in flight during the current one. The values are the CPU's
// (dot_avx2_float.cpp: 32 chains in element order, folded as warp_fold_chains does) bit for
// bit, for rows whose length is a multiple of 32 (no tail steps). DS4_CUDA_FGEMM=0 turns it off.
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/cuda/gemv.h"

namespace ds4::cuda::gemv_detail {

constexpr int64_t kFgemmMinRows = 32;

// F32/F16/BF16 weights, rows >= kFgemmMinRows, n_in % 32 == 0, one group; and not switched off.
bool fgemm_applies(const DevMatrix& w, int64_t rows, int64_t group_rows);
// F16/BF16 weights whose rows, and activation rows, start on 16-byte boundaries: what the
// kernels that stage both by 16-byte copies (k_fgemm2, the tensor-core GEMM) need.
inline bool half_rows_16b_aligned(const DevMatrix& w, const float* x, int64_t x_stride) {
  return (w.type == GgmlType::F16 || w.type == GgmlType::BF16) && w.row_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

// y[r*y_stride + o] = the CPU's f32 dot of weight row o with x row r (x + r*x_stride).
// variant 0: the backend's choice (v2 for F16/BF16 with 16-byte aligned rows when
// fgemm_v2_enabled()), 1: k_fgemm, 2: k_fgemm2 (fails where it does not apply). Same bits.
void fgemm(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
           cudaStream_t stream, int variant = 0);
// k_fgemm2 (8 x 8 chains per lane), on by default since measured; DS4_CUDA_FGEMM_V2=0 (read
// once) for k_fgemm.
bool fgemm_v2_enabled();

// The same products on tensor cores (gemm_float_tc.cu): F16/BF16 weights (exact in TF32) times
// the activations split into two TF32 parts, f32 accumulation in the tensor cores' order. NOT the
// CPU's values: on the H100 within ~4e-6 of the exact dot relative to sum |w x| (the CPU order:
// 5e-8), which broke parity through the routers' and the indexer's top-k (docs/ARCHITECTURE.md).
// Off, and to stay off: DS4_CUDA_FGEMM_TC=1 turns it on (batches of >= kFgemmTcMinRows rows).
constexpr int64_t kFgemmTcMinRows = 64;
bool fgemm_tc_enabled();
// F16/BF16 weights, rows >= kFgemmTcMinRows, n_in % 32 == 0, one group, 16-byte aligned weight
// rows and activation rows. Ignores fgemm_tc_enabled().
bool fgemm_tc_supports(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, int64_t group_rows);
void fgemm_tc(const DevMatrix& w, const float* x, int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
              cudaStream_t stream);

}  // namespace ds4::cuda::gemv_detail
