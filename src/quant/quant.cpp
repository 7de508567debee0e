// Type dispatch and argument checking for the codec API in quant.h. The per-format kernels
// (kernels.h) trust their arguments; everything a caller can get wrong is checked here.
#include "quant/quant.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "quant/kernels.h"
#include "quant/kernels_ext.h"

#if DS4_HAVE_IQ2_XXS
#include "quant/iq2_xxs.h"
#endif
#if DS4_HAVE_AVX2_BUILD
#include <cpuid.h>
#endif

namespace ds4::quant {

namespace {

const char* name_of(GgmlType t) {
  auto tr = type_traits(static_cast<uint32_t>(t));
  return tr ? tr->name.data() : "unknown";
}

// Checks type and length; the buffers only when there is something to read or write.
void check_row(const char* what, GgmlType type, int64_t n, const void* a, const void* b, bool empty = false) {
  auto tr = type_traits(static_cast<uint32_t>(type));
  if (!tr) fail("{}: unsupported ggml type id {}", what, static_cast<uint32_t>(type));
  if (n < 0) fail("{}: negative length {} for {}", what, n, tr->name);
  if (n % tr->block_elems != 0)
    fail("{}: length {} is not a multiple of the {} block size {}", what, n, tr->name, tr->block_elems);
  if (n > 0 && !empty && (!a || !b)) fail("{}: null buffer for {} row of {} elements", what, tr->name, n);
}

void check_finite(const char* what, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isfinite(x[r * cols + c]))
        fail("{}: non-finite value {} at row {}, column {}", what, x[r * cols + c], r, c);
}

#if DS4_HAVE_AVX2_BUILD
// CPUID + XGETBV rather than __builtin_cpu_supports: clang 14 does not know "f16c" there.
// AVX2, FMA and F16C must be present and the OS must save the YMM state (XCR0 bits 1, 2).
bool detect_avx2_fma_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
  if (!(fma && osxsave && f16c)) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
}
#endif

#if DS4_HAVE_AVX512_BUILD
// AVX-512 F, DQ, BW, VL and VNNI, BMI2 (pdep), and the OS saving opmask and ZMM state
// (XCR0 bits 5, 6, 7 besides 1, 2).
bool detect_avx512_vnni() {
  if (!detect_avx2_fma_f16c()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0xE6u) != 0xE6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  const bool bmi2 = b & (1u << 8), vnni = c & (1u << 11);
  return f && dq && bw && vl && bmi2 && vnni;
}
#endif

bool cpu_has_avx512_vnni() {
#if DS4_HAVE_AVX512_BUILD
  static const bool yes = detect_avx512_vnni() && !std::getenv("DS4_NO_AVX512");
  return yes;
#else
  return false;
#endif
}

// AVX-512 VBMI (vpermi2b, vpmultishiftqb) besides the above: the few-token IQ2_XXS / Q2_K kernels.
bool cpu_has_avx512_vbmi() {
#if DS4_HAVE_AVX512_BUILD
  static const bool yes = [] {
    if (!cpu_has_avx512_vnni() || std::getenv("DS4_NO_AVX512_VBMI")) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c & (1u << 1)) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if DS4_HAVE_AVX2_BUILD
  static const bool yes = detect_avx2_fma_f16c();
  return yes;
#else
  return false;
#endif
}

DotFn scalar_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return vec_dot_f32_f32_scalar;
    case GgmlType::F16: return vec_dot_f16_f32_scalar;
    case GgmlType::BF16: return vec_dot_bf16_f32_scalar;
    case GgmlType::Q8_0: return vec_dot_q8_0_q8_0_scalar;
    case GgmlType::Q2_K: return vec_dot_q2_K_q8_K_scalar;
    case GgmlType::Q4_K: return vec_dot_q4_K_q8_K_scalar;
    case GgmlType::Q4_0: return vec_dot_q4_0_q8_0_scalar;
    case GgmlType::Q5_0: return vec_dot_q5_0_q8_0_scalar;
    case GgmlType::Q5_1: return vec_dot_q5_1_q8_1_scalar;
    case GgmlType::IQ4_NL: return vec_dot_iq4_nl_q8_0_scalar;
    case GgmlType::MXFP4: return vec_dot_mxfp4_q8_0_scalar;
    case GgmlType::Q3_K: return vec_dot_q3_K_q8_K_scalar;
    case GgmlType::Q5_K: return vec_dot_q5_K_q8_K_scalar;
    case GgmlType::Q6_K: return vec_dot_q6_K_q8_K_scalar;
    case GgmlType::IQ4_XS: return vec_dot_iq4_xs_q8_K_scalar;
    case GgmlType::IQ2_XS: return vec_dot_iq2_xs_q8_K_scalar;
    case GgmlType::IQ2_S: return vec_dot_iq2_s_q8_K_scalar;
    case GgmlType::IQ3_XXS: return vec_dot_iq3_xxs_q8_K_scalar;
    case GgmlType::IQ3_S: return vec_dot_iq3_s_q8_K_scalar;
    case GgmlType::IQ1_S: return vec_dot_iq1_s_q8_K_scalar;
    case GgmlType::IQ1_M: return vec_dot_iq1_m_q8_K_scalar;
#if DS4_HAVE_IQ2_XXS
    case GgmlType::IQ2_XXS: return vec_dot_iq2_xxs_q8_K_scalar;
#endif
    default: return nullptr;
  }
}

DotFn avx2_kernel(GgmlType t) {
#if DS4_HAVE_AVX2_BUILD
  switch (t) {
    case GgmlType::F32: return vec_dot_f32_f32_avx2;
    case GgmlType::F16: return vec_dot_f16_f32_avx2;
    case GgmlType::BF16: return vec_dot_bf16_f32_avx2;
    case GgmlType::Q8_0: return vec_dot_q8_0_q8_0_avx2;
    case GgmlType::Q2_K: return vec_dot_q2_K_q8_K_avx2;
    case GgmlType::Q4_K: return vec_dot_q4_K_q8_K_avx2;
    case GgmlType::Q4_0: return vec_dot_q4_0_q8_0_avx2;
    case GgmlType::Q5_0: return vec_dot_q5_0_q8_0_avx2;
    case GgmlType::Q5_1: return vec_dot_q5_1_q8_1_avx2;
    case GgmlType::IQ4_NL: return vec_dot_iq4_nl_q8_0_avx2;
    case GgmlType::MXFP4: return vec_dot_mxfp4_q8_0_avx2;
    case GgmlType::Q3_K: return vec_dot_q3_K_q8_K_avx2;
    case GgmlType::Q5_K: return vec_dot_q5_K_q8_K_avx2;
    case GgmlType::Q6_K: return vec_dot_q6_K_q8_K_avx2;
    case GgmlType::IQ4_XS: return vec_dot_iq4_xs_q8_K_avx2;
    case GgmlType::IQ2_XS: return vec_dot_iq2_xs_q8_K_avx2;
    case GgmlType::IQ2_S: return vec_dot_iq2_s_q8_K_avx2;
    case GgmlType::IQ3_XXS: return vec_dot_iq3_xxs_q8_K_avx2;
    case GgmlType::IQ3_S: return vec_dot_iq3_s_q8_K_avx2;
    case GgmlType::IQ1_S: return vec_dot_iq1_s_q8_K_avx2;
    case GgmlType::IQ1_M: return vec_dot_iq1_m_q8_K_avx2;
#if DS4_HAVE_IQ2_XXS_AVX2
    case GgmlType::IQ2_XXS: return vec_dot_iq2_xxs_q8_K_avx2;
#endif
    default: break;
  }
#endif
  (void)t;
  return nullptr;
}

DotFn checked_kernel(const char* what, GgmlType t, bool allow_avx2) {
  DotFn scalar = scalar_kernel(t);
  if (!scalar) fail("{}: no dot product for weight type {}", what, name_of(t));
#if DS4_HAVE_AVX512_BUILD
  // Same floats as the AVX2 float kernels (tested), fewer instructions.
  if (allow_avx2 && cpu_has_avx512_vnni()) {
    if (t == GgmlType::F32) return vec_dot_f32_f32_avx512;
    if (t == GgmlType::F16) return vec_dot_f16_f32_avx512;
  }
#endif
  if (allow_avx2 && cpu_has_avx2())
    if (DotFn fast = avx2_kernel(t)) return fast;
  return scalar;
}

}  // namespace

bool have_avx2() { return cpu_has_avx2(); }

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  check_row("dequantize_row", type, n, src, dst);
#if DS4_HAVE_AVX2_BUILD
  if (cpu_has_avx2()) {
    switch (type) {
      case GgmlType::F16: dequantize_row_f16_avx2(src, dst, n); return;
      case GgmlType::BF16: dequantize_row_bf16_avx2(src, dst, n); return;
      case GgmlType::Q8_0: dequantize_row_q8_0_avx2(src, dst, n); return;
      case GgmlType::Q2_K: dequantize_row_q2_K_avx2(src, dst, n); return;
      case GgmlType::Q4_K: dequantize_row_q4_K_avx2(src, dst, n); return;
      default: break;
    }
  }
#endif
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16: dequantize_row_f16(src, dst, n); return;
    case GgmlType::BF16: dequantize_row_bf16(src, dst, n); return;
    case GgmlType::Q8_0: dequantize_row_q8_0(src, dst, n); return;
    case GgmlType::Q8_K: dequantize_row_q8_K(src, dst, n); return;
    case GgmlType::Q2_K: dequantize_row_q2_K(src, dst, n); return;
    case GgmlType::Q4_K: dequantize_row_q4_K(src, dst, n); return;
    case GgmlType::Q4_0: dequantize_row_q4_0(src, dst, n); return;
    case GgmlType::Q5_0: dequantize_row_q5_0(src, dst, n); return;
    case GgmlType::Q5_1: dequantize_row_q5_1(src, dst, n); return;
    case GgmlType::Q8_1: dequantize_row_q8_1(src, dst, n); return;
    case GgmlType::IQ4_NL: dequantize_row_iq4_nl(src, dst, n); return;
    case GgmlType::MXFP4: dequantize_row_mxfp4(src, dst, n); return;
    case GgmlType::Q3_K: dequantize_row_q3_K(src, dst, n); return;
    case GgmlType::Q5_K: dequantize_row_q5_K(src, dst, n); return;
    case GgmlType::Q6_K: dequantize_row_q6_K(src, dst, n); return;
    case GgmlType::IQ4_XS: dequantize_row_iq4_xs(src, dst, n); return;
    case GgmlType::IQ2_XS: dequantize_row_iq2_xs(src, dst, n); return;
    case GgmlType::IQ2_S: dequantize_row_iq2_s(src, dst, n); return;
    case GgmlType::IQ3_XXS: dequantize_row_iq3_xxs(src, dst, n); return;
    case GgmlType::IQ3_S: dequantize_row_iq3_s(src, dst, n); return;
    case GgmlType::IQ1_S: dequantize_row_iq1_s(src, dst, n); return;
    case GgmlType::IQ1_M: dequantize_row_iq1_m(src, dst, n); return;
#if DS4_HAVE_IQ2_XXS
    case GgmlType::IQ2_XXS: dequantize_row_iq2_xxs(src, dst, n); return;
#endif
    default: fail("dequantize_row: no decoder for type {}", name_of(type));
  }
}

size_t quantize_rows(GgmlType type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix) {
  if (nrows < 0) fail("quantize_rows: negative row count {}", nrows);
  check_row("quantize_rows", type, n_per_row, src, dst, nrows == 0);
  if (nrows == 0 || n_per_row == 0) return 0;
  const int64_t n = nrows * n_per_row;
  const size_t bytes = static_cast<size_t>(nrows) * row_bytes(traits(type), static_cast<uint64_t>(n_per_row));
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return bytes;
    case GgmlType::F16: quantize_row_f16(src, dst, n); return bytes;
    case GgmlType::BF16: quantize_row_bf16(src, dst, n); return bytes;
    default: break;
  }
  check_finite("quantize_rows (input)", src, nrows, n_per_row);
  if (imatrix) {
    check_finite("quantize_rows (importance weights)", imatrix, 1, n_per_row);
    for (int64_t c = 0; c < n_per_row; ++c)
      if (imatrix[c] < 0) fail("quantize_rows: negative importance weight {} at column {}", imatrix[c], c);
  }
  switch (type) {
    case GgmlType::Q8_0: quantize_row_q8_0(src, dst, n); return bytes;  // ggml ignores imatrix here
    case GgmlType::Q2_K: return quantize_q2_K(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q4_K: return quantize_q4_K(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q4_0: return quantize_q4_0(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q5_0: return quantize_q5_0(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q5_1: return quantize_q5_1(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q3_K: return quantize_q3_K(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q5_K: return quantize_q5_K(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::Q6_K: return quantize_q6_K(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ4_NL: return quantize_iq4_nl(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ4_XS: return quantize_iq4_xs(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::MXFP4: return quantize_mxfp4(src, dst, nrows, n_per_row);  // imatrix ignored, as in ggml
    case GgmlType::IQ2_XS: return quantize_iq2_xs(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ2_S: return quantize_iq2_s(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ3_XXS: return quantize_iq3_xxs(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ3_S: return quantize_iq3_s(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ1_S: return quantize_iq1_s(src, dst, nrows, n_per_row, imatrix);
    case GgmlType::IQ1_M: return quantize_iq1_m(src, dst, nrows, n_per_row, imatrix);
#if DS4_HAVE_IQ2_XXS
    case GgmlType::IQ2_XXS: return quantize_iq2_xxs(src, dst, nrows, n_per_row, imatrix);
#endif
    default: fail("quantize_rows: no encoder for type {}", name_of(type));
  }
}

bool needs_imatrix(GgmlType type) {
  return type == GgmlType::IQ2_XXS || type == GgmlType::IQ2_XS || type == GgmlType::IQ1_S;
}

GgmlType vec_dot_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return GgmlType::F32;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return GgmlType::Q8_0;
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return GgmlType::Q8_K;
    default: fail("vec_dot_type: no dot product for weight type {}", name_of(weight_type));
  }
}

void quantize_activation_row(GgmlType act_type, const float* x, void* dst, int64_t n) {
  check_row("quantize_activation_row", act_type, n, x, dst);
#if DS4_HAVE_AVX512_BUILD
  // The vector quantizer checks finiteness on the way; the scalar check names the bad value.
  if (act_type == GgmlType::Q8_0 && cpu_has_avx512_vnni()) {
    if (!quantize_row_q8_0_avx512(x, dst, n)) check_finite("quantize_activation_row", x, 1, n);
    return;
  }
#endif
  check_finite("quantize_activation_row", x, 1, n);
  switch (act_type) {
    case GgmlType::F32: std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::Q8_0: quantize_row_q8_0(x, dst, n); return;
    case GgmlType::Q8_1: quantize_row_q8_1(x, dst, n); return;
    case GgmlType::Q8_K: quantize_row_q8_K(x, dst, n); return;
    default: fail("quantize_activation_row: {} is not an activation format", name_of(act_type));
  }
}

float vec_dot(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n) {
  DotFn f = checked_kernel("vec_dot", weight_type, true);
  check_row("vec_dot", weight_type, n, w_row, act_row);
  return f(w_row, act_row, n);
}

float vec_dot_scalar(GgmlType weight_type, const void* w_row, const void* act_row, int64_t n) {
  DotFn f = checked_kernel("vec_dot_scalar", weight_type, false);
  check_row("vec_dot_scalar", weight_type, n, w_row, act_row);
  return f(w_row, act_row, n);
}

DotKernel dot_kernel(GgmlType weight_type) { return checked_kernel("dot_kernel", weight_type, true); }

bool have_avx512_vnni() { return cpu_has_avx512_vnni(); }
bool have_avx512_vbmi() { return cpu_has_avx512_vbmi(); }

void dot_f32_rows(const float* x, const float* const* rows, int64_t count, int64_t n, float* out) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return dot_f32_rows_avx512(x, rows, count, n, out);
#endif
  const DotKernel dot = dot_kernel(GgmlType::F32);
  for (int64_t k = 0; k < count; ++k) out[k] = dot(x, rows[k], n);
}

void fma_f32_rows(const float* a, const float* const* rows, int64_t count, float* y, int64_t n) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return fma_f32_rows_avx512(a, rows, count, y, n);
#endif
#if DS4_HAVE_AVX2_BUILD
  if (cpu_has_avx2()) return fma_f32_rows_avx2(a, rows, count, y, n);
#endif
  fma_f32_rows_scalar(a, rows, count, y, n);
}

int64_t fp8_e4m3_round_trip_prefix(float* x, int64_t n) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return fp8_e4m3_round_trip_avx512(x, n);
#endif
  (void)x;
  (void)n;
  return 0;
}

int64_t fp4_e2m1_round_trip_prefix(float* x, int64_t n) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return fp4_e2m1_round_trip_avx512(x, n);
#endif
  (void)x;
  (void)n;
  return 0;
}

bool hadamard_transform_fast(float* x, int64_t n) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return hadamard_transform_avx512(x, n);
#endif
  (void)x;
  (void)n;
  return false;
}

int64_t gemm_min_tokens(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::Q8_0: return 1;
    case GgmlType::IQ2_XXS:
    case GgmlType::Q2_K:
      // The AVX-512 few-token kernels need VBMI; without AVX-512 the AVX2 row-group kernels
      // serve every batch size.
      return cpu_has_avx512_vbmi() || !cpu_has_avx512_vnni() ? 1 : 2;
    case GgmlType::Q4_K: return 3;  // the panel decode (codes, 6-bit scales) costs 2.5 per-row passes
    default: return 2;  // Q2_K, IQ2_XXS, F16
  }
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) return axpy_f32_avx512(a, x, y, n);
#endif
#if DS4_HAVE_AVX2_BUILD
  if (cpu_has_avx2()) return axpy_f32_avx2(a, x, y, n);
#endif
  axpy_f32_scalar(a, x, y, n);
}

GemmKernel gemm_kernel(GgmlType weight_type) {
#if DS4_HAVE_AVX512_BUILD
  if (cpu_has_avx512_vnni()) {
    switch (weight_type) {
      case GgmlType::Q8_0: return gemm_q8_0_avx512;
      case GgmlType::Q2_K: return cpu_has_avx512_vbmi() ? gemm_q2_K_avx512vbmi : gemm_q2_K_avx512;
      case GgmlType::Q4_K: return gemm_q4_K_avx512;
      case GgmlType::IQ2_XXS: return cpu_has_avx512_vbmi() ? gemm_iq2_xxs_avx512vbmi : gemm_iq2_xxs_avx512;
      case GgmlType::F16: return gemm_f16_avx512;  // equals the AVX2 kernel, which this CPU has
      default: break;
    }
  }
#endif
#if DS4_HAVE_AVX2_BUILD
  if (cpu_has_avx2()) {
    switch (weight_type) {
      case GgmlType::Q2_K: return gemm_q2_K_avx2;
#if DS4_HAVE_IQ2_XXS_AVX2
      case GgmlType::IQ2_XXS: return gemm_iq2_xxs_avx2;
#endif
      default: break;
    }
  }
#endif
  (void)weight_type;
  return nullptr;
}

}  // namespace ds4::quant
