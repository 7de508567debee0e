// Decoding random blocks (every byte random; scales drawn from edge cases: zeros, denormals,
// infinities, NaNs) must give ggml's floats bit for bit, NaN payloads included, through the
// dispatching API (AVX2 where available) and through the portable scalar decoder.
#include <gtest/gtest.h>

#include "ggml_quant.h"
#include "quant/kernels.h"
#include "quant/quant.h"

namespace ds4::test {
namespace {

using quant::dequantize_row;

struct Layout {
  GgmlType type;
  size_t block_bytes;
  int block_elems;
  std::vector<size_t> half_offsets;  // where the f16 scales sit inside a block
  GgmlQuant::Dequant (*oracle)();
  void (*scalar)(const void*, float*, int64_t);
};

void check_random_blocks(const Layout& L, uint32_t seed) {
  std::mt19937 rng(seed);
  const int nb = 512;
  auto blocks = random_bytes(rng, L.block_bytes * nb);
  for (int b = 0; b < nb; ++b)
    for (size_t off : L.half_offsets) {
      const uint16_t h = edge_or_random_half(rng);
      std::memcpy(&blocks[b * L.block_bytes + off], &h, 2);
    }
  const int64_t n = static_cast<int64_t>(nb) * L.block_elems;
  std::vector<float> want(n), got(n);
  L.oracle()(blocks.data(), want.data(), n);
  dequantize_row(L.type, blocks.data(), got.data(), n);
  int64_t bad = first_bit_mismatch(got, want);
  ASSERT_EQ(bad, -1) << "dispatched: element " << bad << " got " << got[bad] << " want " << want[bad];
  std::fill(got.begin(), got.end(), 0.f);
  L.scalar(blocks.data(), got.data(), n);
  bad = first_bit_mismatch(got, want);
  ASSERT_EQ(bad, -1) << "scalar: element " << bad << " got " << got[bad] << " want " << want[bad];
}

TEST(Dequantize, Q8_0MatchesGgmlBitForBit) {
  check_random_blocks({GgmlType::Q8_0, 34, 32, {0}, [] { return GgmlQuant::get().dequantize_q8_0; }, quant::dequantize_row_q8_0}, 11);
}

TEST(Dequantize, Q2_KMatchesGgmlBitForBit) {
  check_random_blocks({GgmlType::Q2_K, 84, 256, {80, 82}, [] { return GgmlQuant::get().dequantize_q2_K; }, quant::dequantize_row_q2_K},
                      12);
}

TEST(Dequantize, Q4_KMatchesGgmlBitForBit) {
  check_random_blocks({GgmlType::Q4_K, 144, 256, {0, 2}, [] { return GgmlQuant::get().dequantize_q4_K; }, quant::dequantize_row_q4_K},
                      13);
}

TEST(Dequantize, Q8_KMatchesGgmlBitForBit) {
  std::mt19937 rng(14);
  const int nb = 256;
  auto blocks = random_bytes(rng, 292 * static_cast<size_t>(nb));
  static const float kEdge[] = {0.f, -0.f, 1e-45f, -1e-40f, 3.4e38f, INFINITY, -INFINITY, NAN, 1.f / 127};
  for (int b = 0; b < nb; ++b) {
    const float d = b % 3 == 0 ? kEdge[b / 3 % std::size(kEdge)] : std::ldexp(float(rng() % 1000), -int(rng() % 30));
    std::memcpy(&blocks[292 * static_cast<size_t>(b)], &d, 4);
  }
  std::vector<float> want(256 * nb), got(256 * nb);
  GgmlQuant::get().dequantize_q8_K(blocks.data(), want.data(), 256 * nb);
  dequantize_row(GgmlType::Q8_K, blocks.data(), got.data(), 256 * nb);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
}

TEST(Dequantize, EveryHalfAndBf16MatchesGgmlOnBothPaths) {
  std::vector<uint16_t> h(65536 + 7);  // every pattern, plus a tail shorter than a vector
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> want(h.size()), got(h.size());
  const auto n = static_cast<int64_t>(h.size());
  GgmlQuant::get().fp16_to_fp32_row(h.data(), want.data(), n);
  dequantize_row(GgmlType::F16, h.data(), got.data(), n);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
  quant::dequantize_row_f16(h.data(), got.data(), n);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
  GgmlQuant::get().bf16_to_fp32_row(h.data(), want.data(), n);
  dequantize_row(GgmlType::BF16, h.data(), got.data(), n);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
  quant::dequantize_row_bf16(h.data(), got.data(), n);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
}

TEST(Dequantize, F32IsACopy) {
  std::vector<float> x = {1.f, -0.f, NAN, INFINITY}, y(4);
  dequantize_row(GgmlType::F32, x.data(), y.data(), 4);
  EXPECT_EQ(first_bit_mismatch(x, y), -1);
}

}  // namespace
}  // namespace ds4::test
