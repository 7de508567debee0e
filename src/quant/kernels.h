#pragma once
// Per-format codec entry points behind the type-dispatching API in quant.h. Callers that
// already know the format (the compute layer's GEMV loops) may call these directly; they do
// no argument checking: n is a whole number of blocks and pointers are valid.
#include <cstddef>
#include <cstdint>

namespace ds4::quant {

// One signature for every dot kernel: weight row, activation row (vec_dot_type), length.
using DotFn = float (*)(const void* w, const void* act, int64_t n);

// --- float_rows.cpp: F16 / BF16 rows (bit-exact with ggml's row converters) ---
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
// Scalar float dots: 8 interleaved float partial sums, folded like lane_sum.h.
float vec_dot_f32_f32_scalar(const void* w, const void* x, int64_t n);
float vec_dot_f16_f32_scalar(const void* w, const void* x, int64_t n);
float vec_dot_bf16_f32_scalar(const void* w, const void* x, int64_t n);
// y[i] = y[i] + a * x[i], product and sum rounded separately (every path gives these floats).
void axpy_f32_scalar(float a, const float* x, float* y, int64_t n);
void fma_f32_rows_scalar(const float* a, const float* const* rows, int64_t count, float* y, int64_t n);

// --- q8.cpp: Q8_0 (weights and activations) and Q8_K (activations) ---
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);
// As ggml's quantize_row_q8_0_ref (also what quantize_q8_0 does for weights).
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
// As ggml's quantize_row_q8_K_ref, except that an all-zero block gets zero bsums
// (ggml leaves them unwritten).
void quantize_row_q8_K(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_q8_0_scalar(const void* w, const void* act, int64_t n);

// --- k_quants.cpp: Q2_K and Q4_K ---
void dequantize_row_q2_K(const void* src, float* dst, int64_t n);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
// As ggml's quantize_q2_K / quantize_q4_K: imatrix == nullptr selects the reference
// (unweighted) search, otherwise the importance-weighted one.
size_t quantize_q2_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q4_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
float vec_dot_q2_K_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_q4_K_q8_K_scalar(const void* w, const void* act, int64_t n);

#if DS4_HAVE_AVX2_BUILD
// --- dot_avx2_int.cpp / dot_avx2_float.cpp (compiled with -mavx2 -mfma -mf16c) ---
// Integer kernels return exactly the scalar kernel's float; float kernels use FMA and a
// different summation order (error bound in quant.h).
float vec_dot_q8_0_q8_0_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q2_K_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q4_K_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_f32_f32_avx2(const void* w, const void* x, int64_t n);
float vec_dot_f16_f32_avx2(const void* w, const void* x, int64_t n);
float vec_dot_bf16_f32_avx2(const void* w, const void* x, int64_t n);
void axpy_f32_avx2(float a, const float* x, float* y, int64_t n);
void fma_f32_rows_avx2(const float* a, const float* const* rows, int64_t count, float* y, int64_t n);
// --- dequant_avx2.cpp: same floats as the scalar decoders, bit for bit ---
void dequantize_row_q8_0_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_q2_K_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_q4_K_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_f16_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_bf16_avx2(const void* src, float* dst, int64_t n);
#endif

// Rows x tokens product: y[t * y_stride + r] = dot(weight row r at w + r * w_stride, activation
// row t at act + t * act_stride) for r < rows, t < tokens, over n elements; equal bit for bit
// to the scalar kernel of the format.
using GemmFn = void (*)(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                        int64_t tokens, float* y, int64_t y_stride, int64_t n);

#if DS4_HAVE_AVX2_BUILD
// --- AVX2 rows x tokens products for CPUs without AVX-512 VNNI (few tokens, decode); same
// floats as the scalar kernels bit for bit. IQ2_XXS: 8 weight rows per pass with their float
// steps in vector lanes, each lane the scalar kernel's sequence for its row. Q2_K: the per-row
// kernel for each (row, token), tokens inner (its float work is already 8 blocks per vector).
void gemm_q2_K_avx2(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride, int64_t tokens,
                    float* y, int64_t y_stride, int64_t n);  // dot_avx2_int.cpp
#if DS4_HAVE_IQ2_XXS_AVX2
void gemm_iq2_xxs_avx2(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                       int64_t tokens, float* y, int64_t y_stride, int64_t n);  // iq2_xxs_avx2.cpp
#endif
#endif

#if DS4_HAVE_AVX512_BUILD
// --- gemm_avx512.cpp (AVX-512 F/BW/VL/DQ + VNNI + BMI2; run-time checked in quant.cpp) ---
void gemm_q8_0_avx512(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                      int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemm_q2_K_avx512(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                      int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemm_q4_K_avx512(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                      int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemm_iq2_xxs_avx512(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                         int64_t tokens, float* y, int64_t y_stride, int64_t n);
// --- gemv_avx512.cpp (the above plus VBMI; quant.cpp checks for it): few-token products,
// weights decoded in registers, no panel. Same floats as the scalar kernels bit for bit.
// gemv_iq2_xxs returns false, writing nothing, when an activation quant is -128 (then use the
// blocked kernel). The gemm_*_avx512vbmi wrappers take the direct kernels up to
// kGemvMaxTokens* tokens and the blocked ones above (measured: docs/BENCHMARKS.md, issue 16).
inline constexpr int64_t kGemvMaxTokensIq2xxs = 2;
inline constexpr int64_t kGemvMaxTokensQ2K = 2;
bool gemv_iq2_xxs_avx512vbmi(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                             int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemv_q2_K_avx512vbmi(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                          int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemm_iq2_xxs_avx512vbmi(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                             int64_t tokens, float* y, int64_t y_stride, int64_t n);
void gemm_q2_K_avx512vbmi(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                          int64_t tokens, float* y, int64_t y_stride, int64_t n);
// F16 weights, f32 activations: vec_dot_f16_f32_avx2's float bit for bit (FMA, same chains).
void gemm_f16_avx512(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                     int64_t tokens, float* y, int64_t y_stride, int64_t n);
// Per-row float dots equal to the AVX2 kernels bit for bit (dot_kernel picks them on AVX-512).
float vec_dot_f32_f32_avx512(const void* w, const void* x, int64_t n);
float vec_dot_f16_f32_avx512(const void* w, const void* x, int64_t n);
void axpy_f32_avx512(float a, const float* x, float* y, int64_t n);
// Several rows per pass, each result equal to the one-row kernels' (quant.h: dot_f32_rows).
void dot_f32_rows_avx512(const float* x, const float* const* rows, int64_t count, int64_t n, float* out);
void fma_f32_rows_avx512(const float* a, const float* const* rows, int64_t count, float* y, int64_t n);
// quantize_row_q8_0's bytes; false when x holds a non-finite value (output then undefined).
bool quantize_row_q8_0_avx512(const float* x, void* dst, int64_t n);
// --- act_round_avx512.cpp: compute/numerics.h's activation rounding, bit for bit ---
// FP8 round trip in blocks of 64 / FP4 in blocks of 32: the number of leading elements done (a
// whole number of blocks; the first block holding a NaN or infinity and all after are left).
int64_t fp8_e4m3_round_trip_avx512(float* x, int64_t n);
int64_t fp4_e2m1_round_trip_avx512(float* x, int64_t n);
// False (x untouched) unless n is a power of two >= 16.
bool hadamard_transform_avx512(float* x, int64_t n);
#endif

}  // namespace ds4::quant
