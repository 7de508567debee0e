// matmul kernels for F32, F16 and BF16 weights (f32 activations).
#include "compute/cuda/gemv_matmul.cuh"

namespace ds4::cuda::gemv_detail {

void matmul_float(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                  cudaStream_t s) {
  switch (w.type) {
    case GgmlType::F32: launch_matmul<FmtF32, false>(w, aq, af, rows, y, y_stride, s); return;
    case GgmlType::F16: launch_matmul<FmtF16, false>(w, aq, af, rows, y, y_stride, s); return;
    case GgmlType::BF16: launch_matmul<FmtBF16, false>(w, aq, af, rows, y, y_stride, s); return;
    default: fail("CUDA matmul_float: unexpected weight type id {}", static_cast<uint32_t>(w.type));
  }
}

}  // namespace ds4::cuda::gemv_detail
