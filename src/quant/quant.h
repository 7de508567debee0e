#pragma once
// Block codecs for the formats DeepSeek V4 files use (spec §4), bit-exact with ggml.
// Row-level entry points dispatch on the ggml type; per-format functions live in one
// file per format family. Every `n` is a whole number of blocks of that type.
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ds4::quant {

// dst[0..n) = decoded weights of one row (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, Q8_K),
// equal bit for bit to ggml's dequantize_row_* (NaN payloads included) on every path:
// the AVX2 decoders perform the scalar decoder's operations lane by lane.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes nrows rows of n_per_row floats into dst; returns bytes written. For the block
// formats a non-finite input or importance weight is an Error (ggml would write garbage).
// imatrix (n_per_row importance weights, may be null) matches ggml's quant_weights argument.
// Supports F32, F16, BF16, Q8_0 and MXFP4 (imatrix ignored, as in ggml); Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// Q4_0, Q5_0, Q5_1, IQ4_NL, IQ4_XS (null imatrix selects ggml's reference writer, else its
// weighted one); IQ2_S, IQ3_XXS, IQ3_S, IQ1_M (imatrix optional, as in ggml); IQ2_XXS,
// IQ2_XS, IQ1_S (imatrix required, as in ggml). Q8_K / Q8_1 are activation formats
// (quantize_activation_row).
// needs_imatrix(type) says which ones refuse a null imatrix.
size_t quantize_rows(GgmlType type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix);

// True for the types whose writer requires importance weights (IQ2_XXS, IQ2_XS, IQ1_S).
bool needs_imatrix(GgmlType type);

// The activation format a weight type's integer dot product expects:
// Q8_0 -> Q8_0; Q2_K, Q4_K, IQ2_XXS -> Q8_K; F32/F16/BF16 -> F32.
GgmlType vec_dot_type(GgmlType weight_type);

// Quantizes one activation row to vec_dot_type(...) (Q8_0 or Q8_K), like ggml's
// quantize_row_q8_0_ref / quantize_row_q8_K_ref (F32: plain copy). Non-finite x is an Error.
void quantize_activation_row(GgmlType act_type, const float* x, void* dst, int64_t n);

// sum_i w[i]*x[i] for one weight row against one activation row already in vec_dot_type
// (raw float* for F32/F16/BF16 weights). Uses the AVX2 path when the CPU has it.
float vec_dot(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n);

// The scalar reference, always available (tests compare the AVX2 path with it).
float vec_dot_scalar(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n);
//
// Exactness: for Q8_0, Q2_K and Q4_K (integer-accumulating) the AVX2 result equals the scalar
// result bit for bit (same integer sums, same float ops in the same order: block b is added
// into partial sum b % 8, folded as in quant/lane_sum.h); only a NaN result (NaN/inf scales)
// may differ in NaN sign/payload. For F32/F16/BF16 the AVX2 path uses
// FMA and another summation order; both paths satisfy
//   |result - exact| <= (n/8 + 16) * 2^-24 * sum_i |w_i * x_i|
// (each product passes through at most n/8 + 16 roundings in either path: the standard
// blocked-summation bound), so the two paths differ by at most twice that.

// True when the AVX2+FMA+F16C path is compiled in and the CPU supports it.
bool have_avx2();

// The kernel vec_dot would use for this weight type (checked once here, so a GEMV loop can
// call it per row without re-dispatching). The kernel does no checks: n must be a whole
// number of blocks and both rows must hold n elements.
using DotKernel = float (*)(const void* w_row, const void* act_row, int64_t n);
DotKernel dot_kernel(GgmlType weight_type);

// Blocked rows x tokens product for batches (prefill): y[t * y_stride + r] = the dot of weight
// row r (at w + r * w_stride) with activation row t (at act + t * act_stride, in
// vec_dot_type), for r < rows and t < tokens. Each weight block is decoded once per call and
// serves every token. Results equal dot_kernel's bit for bit (tested). Null when this CPU
// has no blocked kernel for the type (today: Q8_0, Q2_K, Q4_K, IQ2_XXS and F16 with AVX-512 + VNNI;
// F16 activations are f32 rows, and its result is the AVX2 float kernel's; without AVX-512 VNNI,
// IQ2_XXS and Q2_K with AVX2: row-group kernels, kernels.h gemm_*_avx2); the
// caller then loops over dot_kernel. No argument checks, as for dot_kernel.
using GemmKernel = void (*)(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                            int64_t tokens, float* y, int64_t y_stride, int64_t n);
GemmKernel gemm_kernel(GgmlType weight_type);

// The batch size from which gemm_kernel(weight_type) is faster than dot_kernel row by row on
// this machine's kernels (bench/gemm_bench, docs/BENCHMARKS.md): 1 for Q8_0, 2 for Q2_K,
// IQ2_XXS and F16, 3 for Q4_K (one token: decoding a panel costs more than one pass of the per-row kernel);
// 1 for IQ2_XXS and Q2_K with the AVX-512 VBMI few-token kernels or the AVX2 row-group kernels.
// Either choice gives the same floats. Meaningless when gemm_kernel returns null.
int64_t gemm_min_tokens(GgmlType weight_type);

// y[i] = y[i] + a * x[i] for i < n (attention's value accumulation). The product is rounded,
// then the sum (never a fused multiply-add), so every path (AVX-512, AVX2, scalar) gives the
// same floats bit for bit.
void axpy_f32(float a, const float* x, float* y, int64_t n);

// True when the AVX-512 F/BW/VL/DQ + VNNI (+ BMI2) kernels are compiled in, the CPU and OS
// support them, and DS4_NO_AVX512 is not set in the environment (set it to measure or test
// the AVX2 path on an AVX-512 machine).
bool have_avx512_vnni();
// have_avx512_vnni() and AVX-512 VBMI, and DS4_NO_AVX512_VBMI not set (set it to measure or test
// the AVX-512 path of a CPU without VBMI): gemm_kernel then takes the few-token IQ2_XXS and Q2_K
// kernels for small batches (gemv_avx512.cpp).
bool have_avx512_vbmi();

// out[k] = dot_kernel(F32)(x, rows[k], n) for k < count: the same floats bit for bit (dot
// products are symmetric in their two operands), several rows per pass where the CPU allows
// (attention's scores).
void dot_f32_rows(const float* x, const float* const* rows, int64_t count, int64_t n, float* out);
// y[i] = fma(a[k], rows[k][i], y[i]) for k = 0..count-1 in order (attention's weighted value
// sum): one fused multiply-add per term, exactly rounded, so every path (AVX-512, AVX2, scalar,
// and the CUDA attention kernels, which use the same order) gives the same floats, at one
// instruction per term where a product and a separate sum took two.
void fma_f32_rows(const float* a, const float* const* rows, int64_t count, float* y, int64_t n);

// Fast paths of DeepSeek V4's activation rounding (compute/numerics.h holds the reference, which
// the quant layer cannot call): fp8_e4m3_round_trip with blocks of 64 and fp4_e2m1_round_trip
// with blocks of 32 on the first elements of x, returning how many were done (a whole number
// of blocks: 0 without AVX-512, and a block holding a NaN or infinity stops it); the caller
// runs the reference on the rest. hadamard_transform_fast returns false, x untouched, when it
// has no fast path for n. Every result equals the reference bit for bit (tested).
int64_t fp8_e4m3_round_trip_prefix(float* x, int64_t n);
int64_t fp4_e2m1_round_trip_prefix(float* x, int64_t n);
bool hadamard_transform_fast(float* x, int64_t n);

}  // namespace ds4::quant
