// core/fp16.h against ggml's row converters: every half, every bf16, and float inputs chosen
// around each rounding boundary of every exponent, plus random bit patterns.
#include <gtest/gtest.h>

#include "core/fp16.h"
#include "ggml_quant.h"

namespace ds4::test {
namespace {

// Floats whose low mantissa bits sit on and next to the half/bf16 rounding points (ties,
// just below/above), for every sign and exponent, plus random bit patterns.
std::vector<float> rounding_probe_floats(std::mt19937& rng) {
  static const uint32_t kLow[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000,
                                  0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x17FFF, 0x18000, 0x7FFFFF};
  std::vector<float> v;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t low : kLow)
        for (int k = 0; k < 4; ++k) {
          const uint32_t hi = (k == 0 ? 0u : static_cast<uint32_t>(rng())) & 0x7FFFFFu & ~0x1FFFFu;
          v.push_back(std::bit_cast<float>((sign << 31) | (e << 23) | ((hi | low) & 0x7FFFFFu)));
        }
  for (int i = 0; i < 1 << 20; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  return v;
}

TEST(Fp16, EveryHalfWidensLikeGgml) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> want(65536), got(65536);
  GgmlQuant::get().fp16_to_fp32_row(h.data(), want.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) got[i] = fp16_to_fp32(h[i]);
  const int64_t bad = first_bit_mismatch(got, want);
  EXPECT_EQ(bad, -1) << "half 0x" << std::hex << bad;
}

TEST(Fp16, EveryBf16WidensLikeGgml) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> want(65536), got(65536);
  GgmlQuant::get().bf16_to_fp32_row(h.data(), want.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) got[i] = bf16_to_fp32(h[i]);
  EXPECT_EQ(first_bit_mismatch(got, want), -1);
}

TEST(Fp16, FloatToHalfRoundsLikeGgml) {
  std::mt19937 rng(1234);
  const auto x = rounding_probe_floats(rng);
  std::vector<uint16_t> want(x.size());
  GgmlQuant::get().fp32_to_fp16_row(x.data(), want.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(fp32_to_fp16(x[i]), want[i]) << "float bits 0x" << std::hex << bits(x[i]);
}

TEST(Fp16, FloatToBf16RoundsLikeGgml) {
  std::mt19937 rng(4321);
  const auto x = rounding_probe_floats(rng);
  std::vector<uint16_t> want(x.size()), want_ref(x.size());
  GgmlQuant::get().fp32_to_bf16_row(x.data(), want.data(), static_cast<int64_t>(x.size()));
  GgmlQuant::get().fp32_to_bf16_row_ref(x.data(), want_ref.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(fp32_to_bf16(x[i]), want_ref[i]) << "float bits 0x" << std::hex << bits(x[i]);
    ASSERT_EQ(fp32_to_bf16(x[i]), want[i]) << "float bits 0x" << std::hex << bits(x[i]);
  }
}

}  // namespace
}  // namespace ds4::test
