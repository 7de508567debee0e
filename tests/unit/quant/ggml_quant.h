#pragma once
// ggml's own codecs (libggml-base.so from llama.cpp v0.5.0, loaded with dlopen) as the
// independent oracle for the quant tests, plus shared random-data helpers.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/ggml_lib.h"

namespace ds4::test {

struct GgmlQuant {
  using Dequant = void (*)(const void*, float*, int64_t);
  using Quant = size_t (*)(const float*, void*, int64_t, int64_t, const float*);
  using RowQuant = void (*)(const float*, void*, int64_t);
  using F16ToF32 = void (*)(const uint16_t*, float*, int64_t);
  using F32ToF16 = void (*)(const float*, uint16_t*, int64_t);

  Dequant dequantize_q8_0, dequantize_q8_K, dequantize_q2_K, dequantize_q4_K;
  Quant quantize_q8_0, quantize_q2_K, quantize_q4_K;
  RowQuant quantize_row_q8_0_ref, quantize_row_q8_K_ref;
  F16ToF32 fp16_to_fp32_row, bf16_to_fp32_row;
  F32ToF16 fp32_to_fp16_row, fp32_to_bf16_row, fp32_to_bf16_row_ref;

  static const GgmlQuant& get() {
    static const GgmlQuant g = [] {
      GgmlQuant r{};
      r.dequantize_q8_0 = ggml_fn<Dequant>("dequantize_row_q8_0");
      r.dequantize_q8_K = ggml_fn<Dequant>("dequantize_row_q8_K");
      r.dequantize_q2_K = ggml_fn<Dequant>("dequantize_row_q2_K");
      r.dequantize_q4_K = ggml_fn<Dequant>("dequantize_row_q4_K");
      r.quantize_q8_0 = ggml_fn<Quant>("quantize_q8_0");
      r.quantize_q2_K = ggml_fn<Quant>("quantize_q2_K");
      r.quantize_q4_K = ggml_fn<Quant>("quantize_q4_K");
      r.quantize_row_q8_0_ref = ggml_fn<RowQuant>("quantize_row_q8_0_ref");
      r.quantize_row_q8_K_ref = ggml_fn<RowQuant>("quantize_row_q8_K_ref");
      r.fp16_to_fp32_row = ggml_fn<F16ToF32>("ggml_fp16_to_fp32_row");
      r.bf16_to_fp32_row = ggml_fn<F16ToF32>("ggml_bf16_to_fp32_row");
      r.fp32_to_fp16_row = ggml_fn<F32ToF16>("ggml_fp32_to_fp16_row");
      r.fp32_to_bf16_row = ggml_fn<F32ToF16>("ggml_fp32_to_bf16_row");
      r.fp32_to_bf16_row_ref = ggml_fn<F32ToF16>("ggml_fp32_to_bf16_row_ref");
      return r;
    }();
    return g;
  }
};

inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Index of the first element whose float bit patterns differ, or -1 (NaNs must match too).
inline int64_t first_bit_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) return static_cast<int64_t>(i);
  return -1;
}

inline int64_t first_byte_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

inline std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Half-precision scale bit patterns that stress the decoders: zeros, denormals, the largest
// finite values, infinities, quiet and signalling NaNs, or a random normal value.
inline uint16_t edge_or_random_half(std::mt19937& rng) {
  static const uint16_t kEdge[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF,
                                   0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7FFF, 0x3C00, 0xBC00};
  const uint32_t r = rng();
  if (r % 4 == 0) return kEdge[(r >> 8) % std::size(kEdge)];
  if (r % 4 == 1) return static_cast<uint16_t>(rng());                  // anything at all
  return static_cast<uint16_t>(0x0400 + (rng() % (0x7800 - 0x0400)));    // positive normal
}

inline std::vector<float> gaussian_row(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> dist(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace ds4::test
