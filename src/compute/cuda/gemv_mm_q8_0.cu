// matmul kernels for Q8_0 weights (Q8_0 activations, or f32 with float_acts).
#include "compute/cuda/gemv_matmul.cuh"

namespace ds4::cuda::gemv_detail {

void matmul_q8_0(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                 cudaStream_t s) {
  switch (w.type) {
    case GgmlType::Q8_0:
      if (float_acts) launch_matmul<FmtQ8_0, true>(w, aq, af, rows, y, y_stride, s);
      else launch_matmul<FmtQ8_0, false>(w, aq, af, rows, y, y_stride, s);
      return;
    default: fail("CUDA matmul_q8_0: unexpected weight type id {}", static_cast<uint32_t>(w.type));
  }
}

}  // namespace ds4::cuda::gemv_detail
