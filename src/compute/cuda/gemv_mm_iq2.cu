// matmul kernels for IQ2_XXS weights (Q8_K activations, or f32 with float_acts).
#include "compute/cuda/gemv_matmul.cuh"

namespace ds4::cuda::gemv_detail {

void matmul_iq2_xxs(const DevMatrix& w, ActQ aq, ActF af, int64_t rows, float* y, int64_t y_stride, bool float_acts,
                    cudaStream_t s) {
  upload_iq2_grid();
  switch (w.type) {
    case GgmlType::IQ2_XXS:
      if (float_acts) launch_matmul<FmtIQ2_XXS, true>(w, aq, af, rows, y, y_stride, s);
      else launch_matmul<FmtIQ2_XXS, false>(w, aq, af, rows, y, y_stride, s);
      return;
    default: fail("CUDA matmul_iq2_xxs: unexpected weight type id {}", static_cast<uint32_t>(w.type));
  }
}

}  // namespace ds4::cuda::gemv_detail
