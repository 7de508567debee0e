#pragma once
// IQ2_XXS codec (spec §4): 2.0625 bits per weight, 256 weights per 66-byte block.
// Dequantization, quantization and the dot product against Q8_K activations reproduce
// ggml's results bit for bit (ggml-quants.c / ggml-cpu quants.c generic code); the AVX2 dot
// product returns exactly the scalar one's float. Every n is a whole number of blocks.
#include <cstddef>
#include <cstdint>

namespace ds4::quant {

inline constexpr int kIq2xxsBlockElems = 256;
inline constexpr int kIq2xxsBlockBytes = 66;

// On-disk block: d is IEEE half bits; qs holds 8 groups of {u32 grid indices, u32 signs+scale}.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[kIq2xxsBlockElems / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == kIq2xxsBlockBytes);

// dst[0..n) = decoded weights of n/256 consecutive blocks at src.
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);

// Quantizes nrows rows of n_per_row floats (n_per_row % 256 == 0) into dst and returns the
// bytes written (nrows * n_per_row / 256 * 66). imatrix holds n_per_row importance weights
// shared by all rows (ggml's quant_weights). ggml refuses IQ2_XXS without one
// (GGML_ASSERT "missing quantization weights"), so a null imatrix throws ds4::Error, as do
// non-finite inputs, negative/non-finite importances and rows whose block scale would not
// fit in f16 (cases where ggml aborts or writes infinities).
size_t quantize_iq2_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

// sum_i w[i]*x[i] for one IQ2_XXS row w and one Q8_K row q8k of n elements, with ggml's
// arithmetic: exact integer sums per block, then sumf += (d_w*d_x)*bsum block by block, * 1/8.
float vec_dot_iq2_xxs_q8_K_scalar(const void* w, const void* q8k, int64_t n);
// Same result bit for bit; needs a CPU with AVX2, FMA and F16C (the caller checks).
float vec_dot_iq2_xxs_q8_K_avx2(const void* w, const void* q8k, int64_t n);

namespace iq2xxs_detail {
// Throws ds4::Error unless n is a non-negative multiple of 256 and the pointers are usable.
// Out of line so that the AVX2 file needs no fmt/error code of its own.
void check_dot_args(const void* w, const void* q8k, int64_t n);
}  // namespace iq2xxs_detail

}  // namespace ds4::quant
