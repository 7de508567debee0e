#pragma once
// Per-format entry points of the further ggml formats (blocks_ext.h), behind quant.h's type
// dispatch. Same contract as kernels.h: no argument checking, n a whole number of blocks.
#include <cstddef>
#include <cstdint>

namespace ds4::quant {

// --- legacy_quants.cpp: 32-weight blocks ---
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
// As ggml's quantize_row_q8_1_ref (activations of the Q5_1 dot).
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
// As ggml's quantize_q4_0 / q5_0 / q5_1: imatrix == nullptr selects the reference writer.
size_t quantize_q4_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
// As ggml's quantize_mxfp4 (its reference writer; ggml ignores importance weights here too).
size_t quantize_mxfp4(const float* src, void* dst, int64_t nrows, int64_t n_per_row);
float vec_dot_q4_0_q8_0_scalar(const void* w, const void* act, int64_t n);
float vec_dot_q5_0_q8_0_scalar(const void* w, const void* act, int64_t n);
float vec_dot_q5_1_q8_1_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_q8_0_scalar(const void* w, const void* act, int64_t n);
float vec_dot_mxfp4_q8_0_scalar(const void* w, const void* act, int64_t n);

// --- k_quants_hi.cpp: Q3_K, Q5_K, Q6_K ---
void dequantize_row_q3_K(const void* src, float* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
size_t quantize_q3_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q5_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_q6_K(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
float vec_dot_q3_K_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_q5_K_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_q6_K_q8_K_scalar(const void* w, const void* act, int64_t n);

// --- iq_quants.cpp: codebook formats and IQ4_XS ---
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);
// As ggml's quantize_iq4_nl / quantize_iq4_xs (imatrix optional in both).
size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
float vec_dot_iq2_xs_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq2_s_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq3_xxs_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq3_s_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq1_s_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq1_m_q8_K_scalar(const void* w, const void* act, int64_t n);
float vec_dot_iq4_xs_q8_K_scalar(const void* w, const void* act, int64_t n);

// --- iq2_writers.cpp, iq3_writers.cpp, iq1_writers.cpp: ggml's codebook writers, byte for byte
// (search tables in iq_search.h). imatrix: n_per_row importance weights shared by all rows.
// IQ2_XS and IQ1_S need one (ggml asserts without); the others fall back to ggml's x^2-based
// weights when it is null. Non-finite intermediates are errors (ggml asserts or aborts).
size_t quantize_iq2_xs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq2_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq3_xxs(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq3_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq1_s(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
size_t quantize_iq1_m(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);

#if DS4_HAVE_AVX2_BUILD
// --- dot_avx2_ext.cpp: the same floats as the scalar kernels, bit for bit ---
float vec_dot_q4_0_q8_0_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q5_0_q8_0_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q5_1_q8_1_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq4_nl_q8_0_avx2(const void* w, const void* act, int64_t n);
float vec_dot_mxfp4_q8_0_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q3_K_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q5_K_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_q6_K_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq4_xs_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq2_xs_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq2_s_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq3_xxs_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq3_s_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq1_s_q8_K_avx2(const void* w, const void* act, int64_t n);
float vec_dot_iq1_m_q8_K_avx2(const void* w, const void* act, int64_t n);
#endif

}  // namespace ds4::quant
