// Decoding random blocks (every byte random; f16 scales from edge cases: zeros, denormals,
// infinities, NaNs) must give ggml's floats bit for bit, NaN payloads included, through the
// dispatching API and through the scalar decoder.
#include <gtest/gtest.h>

#include "ext_formats.h"

namespace ds4::test {
namespace {

TEST(DequantizeExt, EveryFormatMatchesGgmlBitForBit) {
  uint32_t seed = 1000;
  for (const auto& f : ext_formats()) {
    for (int rep = 0; rep < 2; ++rep) {
      std::mt19937 rng(seed++);
      const int nb = 300;
      const auto blocks = rep == 0 ? random_blocks(rng, f, nb, edge_or_random_half) : random_blocks(rng, f, nb, normal_half);
      const int64_t n = static_cast<int64_t>(nb) * traits(f.type).block_elems;
      std::vector<float> want(n), got(n);
      ggml_dequant(f)(blocks.data(), want.data(), n);
      quant::dequantize_row(f.type, blocks.data(), got.data(), n);
      int64_t bad = first_bit_mismatch(got, want);
      ASSERT_EQ(bad, -1) << f.ggml_name << " dispatched: element " << bad << " got " << got[bad] << " want " << want[bad];
      std::fill(got.begin(), got.end(), 0.f);
      f.scalar_dequant(blocks.data(), got.data(), n);
      bad = first_bit_mismatch(got, want);
      ASSERT_EQ(bad, -1) << f.ggml_name << " scalar: element " << bad << " got " << got[bad] << " want " << want[bad];
    }
  }
}

TEST(DequantizeExt, Q8_1MatchesGgml) {
  std::mt19937 rng(77);
  const auto x = gaussian_row(rng, 32 * 64, 2.f);
  std::vector<uint8_t> blocks(36 * 64);
  ggml_fn<GgmlQuant::RowQuant>("quantize_row_q8_1_ref")(x.data(), blocks.data(), 32 * 64);
  // ggml has no Q8_1 decoder; its values are d * qs by definition (the struct layout).
  std::vector<float> got(32 * 64);
  quant::dequantize_row(GgmlType::Q8_1, blocks.data(), got.data(), 32 * 64);
  for (int b = 0; b < 64; ++b) {
    uint16_t d;
    std::memcpy(&d, &blocks[36 * b], 2);
    std::vector<float> one(32);
    GgmlQuant::get().fp16_to_fp32_row(&d, one.data(), 1);
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(bits(got[32 * b + j]), bits(static_cast<int8_t>(blocks[36 * b + 4 + j]) * one[0])) << b << "," << j;
  }
}

TEST(DequantizeExt, TypeTraitsMatchGgml) {
  using RowSize = size_t (*)(int, int64_t);
  using BlkSize = int64_t (*)(int);
  auto row_size = ggml_fn<RowSize>("ggml_row_size");
  auto blck_size = ggml_fn<BlkSize>("ggml_blck_size");
  for (const auto& f : ext_formats()) {
    const auto& t = traits(f.type);
    EXPECT_EQ(static_cast<int64_t>(t.block_elems), blck_size(static_cast<int>(f.type))) << f.ggml_name;
    EXPECT_EQ(row_size(static_cast<int>(f.type), 4096), row_bytes(t, 4096)) << f.ggml_name;
    EXPECT_EQ(type_from_name(f.ggml_name), f.type) << f.ggml_name;
  }
  EXPECT_EQ(row_size(static_cast<int>(GgmlType::Q8_1), 4096), row_bytes(traits(GgmlType::Q8_1), 4096));
}

}  // namespace
}  // namespace ds4::test
