#pragma once
// The formats under test with where their scales sit, their ggml oracle names and our kernels.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../quant/ggml_quant.h"
#include "quant/kernels.h"
#include "quant/kernels_ext.h"
#include "quant/quant.h"

namespace ds4::test {

struct ExtFormat {
  GgmlType type;
  const char* ggml_name;              // suffix of dequantize_row_* / quantize_*
  std::vector<size_t> half_offsets;   // f16 scales inside a block
  size_t e8m0_offset;                 // MXFP4's exponent byte, else SIZE_MAX
  void (*scalar_dequant)(const void*, float*, int64_t);
  quant::DotFn scalar_dot;
  quant::DotFn avx2_dot;              // nullptr without an AVX2 build
};

#if DS4_HAVE_AVX2_BUILD
#define DS4_AVX2(f) quant::f
#else
#define DS4_AVX2(f) nullptr
#endif

inline const std::vector<ExtFormat>& ext_formats() {
  static const std::vector<ExtFormat> v = {
      {GgmlType::Q4_0, "q4_0", {0}, SIZE_MAX, quant::dequantize_row_q4_0, quant::vec_dot_q4_0_q8_0_scalar, DS4_AVX2(vec_dot_q4_0_q8_0_avx2)},
      {GgmlType::Q5_0, "q5_0", {0}, SIZE_MAX, quant::dequantize_row_q5_0, quant::vec_dot_q5_0_q8_0_scalar, DS4_AVX2(vec_dot_q5_0_q8_0_avx2)},
      {GgmlType::Q5_1, "q5_1", {0, 2}, SIZE_MAX, quant::dequantize_row_q5_1, quant::vec_dot_q5_1_q8_1_scalar, DS4_AVX2(vec_dot_q5_1_q8_1_avx2)},
      {GgmlType::IQ4_NL, "iq4_nl", {0}, SIZE_MAX, quant::dequantize_row_iq4_nl, quant::vec_dot_iq4_nl_q8_0_scalar, DS4_AVX2(vec_dot_iq4_nl_q8_0_avx2)},
      {GgmlType::MXFP4, "mxfp4", {}, 0, quant::dequantize_row_mxfp4, quant::vec_dot_mxfp4_q8_0_scalar, DS4_AVX2(vec_dot_mxfp4_q8_0_avx2)},
      {GgmlType::Q3_K, "q3_K", {108}, SIZE_MAX, quant::dequantize_row_q3_K, quant::vec_dot_q3_K_q8_K_scalar, DS4_AVX2(vec_dot_q3_K_q8_K_avx2)},
      {GgmlType::Q5_K, "q5_K", {0, 2}, SIZE_MAX, quant::dequantize_row_q5_K, quant::vec_dot_q5_K_q8_K_scalar, DS4_AVX2(vec_dot_q5_K_q8_K_avx2)},
      {GgmlType::Q6_K, "q6_K", {208}, SIZE_MAX, quant::dequantize_row_q6_K, quant::vec_dot_q6_K_q8_K_scalar, DS4_AVX2(vec_dot_q6_K_q8_K_avx2)},
      {GgmlType::IQ4_XS, "iq4_xs", {0}, SIZE_MAX, quant::dequantize_row_iq4_xs, quant::vec_dot_iq4_xs_q8_K_scalar, DS4_AVX2(vec_dot_iq4_xs_q8_K_avx2)},
      {GgmlType::IQ2_XS, "iq2_xs", {0}, SIZE_MAX, quant::dequantize_row_iq2_xs, quant::vec_dot_iq2_xs_q8_K_scalar, DS4_AVX2(vec_dot_iq2_xs_q8_K_avx2)},
      {GgmlType::IQ2_S, "iq2_s", {0}, SIZE_MAX, quant::dequantize_row_iq2_s, quant::vec_dot_iq2_s_q8_K_scalar, DS4_AVX2(vec_dot_iq2_s_q8_K_avx2)},
      {GgmlType::IQ3_XXS, "iq3_xxs", {0}, SIZE_MAX, quant::dequantize_row_iq3_xxs, quant::vec_dot_iq3_xxs_q8_K_scalar, DS4_AVX2(vec_dot_iq3_xxs_q8_K_avx2)},
      {GgmlType::IQ3_S, "iq3_s", {0}, SIZE_MAX, quant::dequantize_row_iq3_s, quant::vec_dot_iq3_s_q8_K_scalar, DS4_AVX2(vec_dot_iq3_s_q8_K_avx2)},
      {GgmlType::IQ1_S, "iq1_s", {0}, SIZE_MAX, quant::dequantize_row_iq1_s, quant::vec_dot_iq1_s_q8_K_scalar, DS4_AVX2(vec_dot_iq1_s_q8_K_avx2)},
      // IQ1_M's f16 scale is spread over the top nibbles of its 4 scale words (bytes 48..55).
      {GgmlType::IQ1_M, "iq1_m", {}, SIZE_MAX, quant::dequantize_row_iq1_m, quant::vec_dot_iq1_m_q8_K_scalar, DS4_AVX2(vec_dot_iq1_m_q8_K_avx2)},
  };
  return v;
}

inline GgmlQuant::Dequant ggml_dequant(const ExtFormat& f) {
  return ggml_fn<GgmlQuant::Dequant>(("dequantize_row_" + std::string(f.ggml_name)).c_str());
}

// Random blocks; f16 scales drawn by `half` (edge cases or normal values).
template <class Half>
std::vector<uint8_t> random_blocks(std::mt19937& rng, const ExtFormat& f, int nb, Half half) {
  const size_t bb = traits(f.type).block_bytes;
  auto blocks = random_bytes(rng, bb * static_cast<size_t>(nb));
  for (int b = 0; b < nb; ++b) {
    for (size_t off : f.half_offsets) {
      const uint16_t h = half(rng);
      std::memcpy(&blocks[b * bb + off], &h, 2);
    }
    if (f.type == GgmlType::IQ1_M) {  // put the scale's nibbles into the top of each word
      const uint16_t h = half(rng);
      for (int k = 0; k < 4; ++k) {
        uint16_t w;
        std::memcpy(&w, &blocks[b * bb + 48 + 2 * k], 2);
        w = static_cast<uint16_t>((w & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
        std::memcpy(&blocks[b * bb + 48 + 2 * k], &w, 2);
      }
    }
    if (f.e8m0_offset != SIZE_MAX && half(rng) % 4 != 0)  // mostly moderate exponents
      blocks[b * bb + f.e8m0_offset] = static_cast<uint8_t>(110 + rng() % 30);
  }
  return blocks;
}

inline uint16_t normal_half(std::mt19937& rng) { return static_cast<uint16_t>(0x0400 + rng() % (0x7800 - 0x0400)); }
// Scales of model-like size (|d| between 2^-14 and 2^-4) so that dots stay finite.
inline uint16_t moderate_half(std::mt19937& rng) { return static_cast<uint16_t>(0x0400 + rng() % 0x2800); }

}  // namespace ds4::test
