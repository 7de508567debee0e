#pragma once
// The CPU backend's SwiGLU of one (gate, up) value pair times the routing weight, bit for bit:
// std::min / std::clamp as written there, e^x as compute::exp_f (exp in double, rounded once),
// each operation rounded on its own. Shared by every routed-expert kernel (gemv_moe.cu,
// gemm_moe_mma.cu) and by the host test of the tensor-core path (test_gemm_moe_mma_host, built
// with -ffp-contract=off). NaN in stays NaN out.
#include <cmath>

namespace ds4::cuda {

__host__ __device__ inline float swiglu_cpu(float gv, float uv, float limit, float weight) {
  if (limit > 0.0f) {
    gv = limit < gv ? limit : gv;                           // std::min(gv, limit)
    uv = uv < -limit ? -limit : (limit < uv ? limit : uv);  // std::clamp(uv, -limit, limit)
  }
  const float e = static_cast<float>(exp(static_cast<double>(-gv)));
#ifdef __CUDA_ARCH__
  return __fmul_rn(__fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, e)), uv), weight);
#else
  const float silu = gv / (1.0f + e);
  return (silu * uv) * weight;
#endif
}

}  // namespace ds4::cuda
