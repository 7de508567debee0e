// matmul kernels for Q2_K and Q4_K weights (Q8_K activations, or f32 with float_acts).
#include "compute/cuda/gemv_matmul.cuh"

namespace ds4::cuda::gemv_detail {

void matmul_kquant(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                   cudaStream_t s) {
  switch (w.type) {
    case GgmlType::Q2_K:
      if (float_acts) launch_matmul<FmtQ2_K, true>(w, aq, af, rows, y, y_stride, s);
      else launch_matmul<FmtQ2_K, false>(w, aq, af, rows, y, y_stride, s);
      return;
    case GgmlType::Q4_K:
      if (float_acts) launch_matmul<FmtQ4_K, true>(w, aq, af, rows, y, y_stride, s);
      else launch_matmul<FmtQ4_K, false>(w, aq, af, rows, y, y_stride, s);
      return;
    default: fail("CUDA matmul_kquant: unexpected weight type id {}", static_cast<uint32_t>(w.type));
  }
}

}  // namespace ds4::cuda::gemv_detail
