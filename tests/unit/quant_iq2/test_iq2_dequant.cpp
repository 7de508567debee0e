// IQ2_XXS dequantization: bit-exact against ggml's dequantize_row_iq2_xxs, and the spec formula.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "ggml_iq2.h"
#include "quant/iq2_xxs.h"

namespace ds4::quant {
namespace {

using test::GgmlIq2;

// f16 scales covering the edge cases: zeros, negatives, subnormals, extremes, inf and NaN.
constexpr uint16_t kEdgeScales[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8001, 0x0400, 0x3c00, 0xbc00,
                                    0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x1234, 0x2e66};

std::vector<BlockIQ2_XXS> random_blocks(std::mt19937& rng, size_t count) {
  std::vector<BlockIQ2_XXS> blocks(count);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale(0.f, 0.01f);
  for (size_t b = 0; b < count; ++b) {
    auto* raw = reinterpret_cast<uint8_t*>(&blocks[b]);
    for (int i = 0; i < kIq2xxsBlockBytes; ++i) raw[i] = static_cast<uint8_t>(byte(rng));
    // A third each: edge-case scales, typical model scales, and fully random bits.
    if (b % 3 == 0) blocks[b].d = kEdgeScales[(b / 3) % std::size(kEdgeScales)];
    if (b % 3 == 1) blocks[b].d = fp32_to_fp16(scale(rng));
  }
  return blocks;
}

TEST(Iq2Dequant, BitExactWithGgmlOnRandomBlocks) {
  std::mt19937 rng(1234);
  const size_t nblocks = 3000;
  const auto blocks = random_blocks(rng, nblocks);
  const int64_t n = static_cast<int64_t>(nblocks) * kIq2xxsBlockElems;
  std::vector<float> ours(n), ref(n);
  dequantize_row_iq2_xxs(blocks.data(), ours.data(), n);
  GgmlIq2::get().dequantize(blocks.data(), ref.data(), n);
  size_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(ours[i]) != std::bit_cast<uint32_t>(ref[i])) {
      if (++mismatches <= 5)
        ADD_FAILURE() << "element " << i << " (block " << i / 256 << ", d=0x" << std::hex << blocks[i / 256].d
                      << std::dec << "): ours " << ours[i] << " ggml " << ref[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(Iq2Dequant, EveryGridIndexSignPatternAndScaleDecodesLikeGgml) {
  // Systematic coverage: all 256 grid indices x all 128 sign codes x all 16 sub-block scales.
  std::vector<BlockIQ2_XXS> blocks;
  for (int idx = 0; idx < 256; idx += 4) {
    for (int s = 0; s < 128; s += 4) {
      BlockIQ2_XXS b{};
      b.d = 0x3c00;
      for (int g = 0; g < 8; ++g) {
        const uint32_t a = static_cast<uint32_t>(idx) | static_cast<uint32_t>(idx + 1) << 8 |
                           static_cast<uint32_t>(idx + 2) << 16 | static_cast<uint32_t>(idx + 3) << 24;
        const uint32_t scale = static_cast<uint32_t>((g + 8 * (s / 4)) & 15);
        const uint32_t signs = static_cast<uint32_t>(s) | static_cast<uint32_t>(s + 1) << 7 |
                               static_cast<uint32_t>(s + 2) << 14 | static_cast<uint32_t>(s + 3) << 21;
        const uint32_t words[2] = {a, signs | scale << 28};
        std::memcpy(b.qs + 4 * g, words, sizeof words);
      }
      blocks.push_back(b);
    }
  }
  const int64_t n = static_cast<int64_t>(blocks.size()) * kIq2xxsBlockElems;
  std::vector<float> ours(n), ref(n);
  dequantize_row_iq2_xxs(blocks.data(), ours.data(), n);
  GgmlIq2::get().dequantize(blocks.data(), ref.data(), n);
  EXPECT_EQ(std::memcmp(ours.data(), ref.data(), n * sizeof(float)), 0);
}

TEST(Iq2Dequant, HandBuiltBlockFollowsSpecFormula) {
  // Spec §4: value j of sub-block l = d * (0.5 + s) * 0.25 * grid_byte_j * (sign bit j ? -1 : 1).
  // Group 0: grid indices 0 (all 0x08), 1 (0x080808080808082b), 2, 3; sign codes 1, 0, 0, 0
  // (code 1 -> ksigns 0x81: weights 0 and 7 negative); s = 3; d = 2.0 (0x4000).
  BlockIQ2_XXS b{};
  b.d = 0x4000;
  const uint32_t words[2] = {0x03020100u, 1u | (3u << 28)};
  std::memcpy(b.qs, words, sizeof words);
  std::vector<float> y(256);
  dequantize_row_iq2_xxs(&b, y.data(), 256);
  const float db = 2.0f * 3.5f * 0.25f;  // 1.75
  EXPECT_EQ(y[0], -db * 8);
  for (int j = 1; j < 7; ++j) EXPECT_EQ(y[j], db * 8) << j;
  EXPECT_EQ(y[7], -db * 8);
  EXPECT_EQ(y[8], db * 0x2b);  // entry 1's lowest byte is 0x2b: it belongs to weight 0
  for (int j = 1; j < 8; ++j) EXPECT_EQ(y[8 + j], db * 8) << j;
  // Groups 1..7 are all-zero words: grid 0 (all 8), no signs, s = 0, so d * 0.5 * 0.25 * 8 = 2.
  for (int i = 32; i < 256; ++i) EXPECT_EQ(y[i], 2.0f) << i;
}

TEST(Iq2Dequant, RejectsPartialBlocks) {
  std::vector<BlockIQ2_XXS> blocks(2);
  std::vector<float> y(512);
  EXPECT_THROW(dequantize_row_iq2_xxs(blocks.data(), y.data(), 300), Error);
  EXPECT_THROW(dequantize_row_iq2_xxs(blocks.data(), y.data(), -256), Error);
  EXPECT_THROW(dequantize_row_iq2_xxs(nullptr, y.data(), 256), Error);
  EXPECT_NO_THROW(dequantize_row_iq2_xxs(nullptr, nullptr, 0));
}

}  // namespace
}  // namespace ds4::quant
