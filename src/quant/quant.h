#pragma once
// Block codecs for the formats DeepSeek V4 files use (spec §4), bit-exact with ggml.
// Row-level entry points dispatch on the ggml type; per-format functions live in one
// file per format family. Every `n` is a whole number of blocks of that type.
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ds4::quant {

// dst[0..n) = decoded weights of one row (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS, Q8_K).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes nrows rows of n_per_row floats into dst; returns bytes written.
// imatrix (n_per_row importance weights, may be null) matches ggml's quant_weights argument.
// Supports F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS (IQ2_XXS requires an imatrix or
// falls back to ggml's unweighted rule exactly as ggml does).
size_t quantize_rows(GgmlType type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix);

// The activation format a weight type's integer dot product expects:
// Q8_0 -> Q8_0; Q2_K, Q4_K, IQ2_XXS -> Q8_K; F32/F16/BF16 -> F32.
GgmlType vec_dot_type(GgmlType weight_type);

// Quantizes one activation row to vec_dot_type(...) (Q8_0 or Q8_K), like ggml's quantize_row_*.
void quantize_activation_row(GgmlType act_type, const float* x, void* dst, int64_t n);

// sum_i w[i]*x[i] for one weight row against one activation row already in vec_dot_type
// (raw float* for F32/F16/BF16 weights). Uses the AVX2 path when the CPU has it.
float vec_dot(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n);

// The scalar reference, always available (tests compare the AVX2 path with it).
float vec_dot_scalar(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n);

// True when the AVX2+FMA path is compiled in and the CPU supports it.
bool have_avx2();

}  // namespace ds4::quant
