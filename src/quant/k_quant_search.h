#pragma once
// Scale/min searches used by the K-quant writers (search_scale_qp also by IQ2_XXS). They reproduce ggml's make_qkx2_quants,
// make_qkx3_quants and make_qp_quants operation for operation (same float expression order,
// same int/uint8 truncations) because the written bytes must equal ggml's. Compile with
// -ffp-contract=off: a fused multiply-add would change the roundings.
#include <bit>
#include <cstdint>

namespace ds4::quant {

// Round to nearest (ties to even) by adding 1.5*2^23 and reading the mantissa. Valid for
// |x| <= 4194303; outside that it returns the same wrapped value as ggml, which matters
// because degenerate blocks do reach it. static: see blocks.h.
static inline int nearest_int(float x) {
  const float v = x + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(v) & 0x007fffffu) - 0x00400000;
}

// Asymmetric n-element fit x ~ scale*L + min, L in [0, nmax], min <= 0, by trying
// nstep+1 candidate inverse scales (rmin + rdelta*is + nmax)/(max - min) and refitting
// scale and min by weighted least squares. Returns the scale; *neg_min = -min.
// use_mad selects weighted absolute error instead of squared error for the comparison.
float search_scale_min_qkx2(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                            float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                            bool use_mad);

// The importance-weighted variant: same search, `max <= min` as the degenerate test.
// (ggml's weights==nullptr fallback is unreachable from the writers and is not provided.)
float search_scale_min_qkx3(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                            float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep);

// Quantizes n non-negative values (the sub-block scales or mins) to L in [0, nmax] with a
// weighted search; returns the super-block scale.
float search_scale_qp(int n, int nmax, const float* x, uint8_t* L, const float* weights);

// Symmetric fit x ~ scale*(L - nmax), L in [0, 2*nmax): ggml's make_qx_quants with
// rmse_type 1 (weights == nullptr means x^2). Returns the scale.
float search_scale_qx(int n, int nmax, const float* x, int8_t* L, const float* weights);

// ggml's make_q3_quants with do_rmse (Q3_K's reference writer): L in [0, 2*nmax).
float search_scale_q3(int n, int nmax, const float* x, int8_t* L);

}  // namespace ds4::quant
