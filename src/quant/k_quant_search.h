#pragma once
// Scale/min searches used by the K-quant writers (search_scale_qp also by IQ2_XXS). They reproduce ggml's make_qkx2_quants,
// make_qkx3_quants and make_qp_quants operation for operation (same float expression order,
// same int/uint8 truncations) because the written bytes must equal ggml's. Compile with
// -ffp-contract=off: a fused multiply-add would change the roundings.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant {

// Round to nearest (ties to even) by adding 1.5*2^23 and reading the mantissa. Valid for
// |x| <= 4194303; outside that it returns the same wrapped value as ggml, which matters
// because degenerate blocks do reach it. static: see blocks.h.
static inline int nearest_int(float x) {
  const float v = x + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(v) & 0x007fffffu) - 0x00400000;
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Packs the 6-bit scale ls and min lm of sub-block j (0..7) into the 12 scale bytes of Q4_K
// and Q5_K (spec §4 layout; the inverse of q4k_scale_min). Sub-blocks 0..3 must be written
// first: 4..7 add their high bits to those bytes.
void pack_scale_min6(int j, uint8_t ls, uint8_t lm, uint8_t* s);

// Runs a per-super-block writer over nrows x n_per_row (a multiple of 256): ref(x, block)
// without importance weights, weighted(x, block, imatrix + column) with them (they repeat per
// row). Returns the bytes written.
template <class Block, class Ref, class Weighted>
size_t quantize_blocks256(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix,
                          Ref ref, Weighted weighted) {
  auto* out = static_cast<Block*>(dst);
  const int64_t nb = n_per_row / kQK_K;
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t i = 0; i < nb; ++i) {
      const float* x = src + r * n_per_row + i * kQK_K;
      Block* y = out + r * nb + i;
      if (imatrix)
        weighted(x, y, imatrix + i * kQK_K);
      else
        ref(x, y);
    }
  return static_cast<size_t>(nrows * nb) * sizeof(Block);
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
