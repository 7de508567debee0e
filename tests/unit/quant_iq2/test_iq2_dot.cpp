// IQ2_XXS x Q8_K dot product: scalar equals ggml's portable generic code bit for bit, the AVX2
// path equals the scalar one bit for bit, and both approximate the exact dot product of the
// dequantized rows.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "ggml_iq2.h"
#include "quant/blocks.h"
#include "quant/iq2_xxs.h"
#include "quant/quant.h"

namespace ds4::quant {
namespace {

using test::GgmlIq2;
using test::gaussian;

// The AVX2 kernel needs AVX2, FMA and F16C; the library's own CPUID check says whether they exist.
bool cpu_has_avx2_fma() { return have_avx2(); }

// Weight rows independent of our quantizer: random grid/sign/scale bits with model-like d.
std::vector<BlockIQ2_XXS> random_weight_blocks(std::mt19937& rng, size_t count) {
  std::vector<BlockIQ2_XXS> blocks(count);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale(0.f, 0.005f);
  for (auto& b : blocks) {
    auto* raw = reinterpret_cast<uint8_t*>(&b);
    for (int i = 0; i < kIq2xxsBlockBytes; ++i) raw[i] = static_cast<uint8_t>(byte(rng));
    b.d = fp32_to_fp16(scale(rng));
  }
  return blocks;
}

std::vector<BlockQ8_K> q8k_from(const std::vector<float>& x) {
  std::vector<BlockQ8_K> y(x.size() / 256);
  GgmlIq2::get().quantize_q8_K_ref(x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(Iq2Dot, ScalarMatchesGgmlGenericAndAvx2MatchesScalar) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int64_t nb : {1, 2, 7, 16, 64, 65, 200}) {
    const int64_t n = nb * 256;
    for (int rep = 0; rep < 20; ++rep) {
      const auto w = random_weight_blocks(rng, nb);
      const auto y = q8k_from(gaussian(rng, n, rep % 2 ? 3.f : 0.01f));
      const float ours = vec_dot_iq2_xxs_q8_K_scalar(w.data(), y.data(), n);
      const float ref = GgmlIq2::get().vec_dot(w.data(), y.data(), n);
      ASSERT_EQ(bits(ours), bits(ref)) << "nb=" << nb << " rep=" << rep << ": " << ours << " vs ggml " << ref;
      if (cpu_has_avx2_fma()) {
        const float simd = vec_dot_iq2_xxs_q8_K_avx2(w.data(), y.data(), n);
        ASSERT_EQ(bits(simd), bits(ours)) << "nb=" << nb << " rep=" << rep << ": " << simd << " vs " << ours;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 140);
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2+FMA on this CPU: AVX2 path not exercised";
}

TEST(Iq2Dot, ArbitraryQ8KBytesIncludingMinus128) {
  // Q8_K blocks with random int8 values over the full range, including -128 (which ggml's
  // quantizer never emits and the AVX2 path must route to its exact fallback): all -128,
  // [-127, 127] (the SIMD path at its extremes), and [-128, 127] mixed.
  std::mt19937 rng(12);
  const int64_t nb = 40, n = nb * 256;
  for (int rep = 0; rep < 12; ++rep) {
    std::uniform_int_distribution<int> q(rep % 3 == 1 ? -127 : -128, rep % 3 == 0 ? -128 : 127);
    const auto w = random_weight_blocks(rng, nb);
    std::vector<BlockQ8_K> y(nb);
    for (auto& b : y) {
      b.d = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
      for (auto& v : b.qs) v = static_cast<int8_t>(q(rng));
      std::memset(b.bsums, 0, sizeof b.bsums);  // unused by IQ2_XXS
    }
    const float ours = vec_dot_iq2_xxs_q8_K_scalar(w.data(), y.data(), n);
    ASSERT_EQ(bits(ours), bits(GgmlIq2::get().vec_dot(w.data(), y.data(), n))) << rep;
    if (cpu_has_avx2_fma()) {
      ASSERT_EQ(bits(vec_dot_iq2_xxs_q8_K_avx2(w.data(), y.data(), n)), bits(ours)) << rep;
    }
  }
}

// Same float bits, except that any NaN equals any NaN: when both scales are NaN, which
// payload survives a multiply depends on the operand order the compiler picked (IEEE 754
// leaves it open), so NaN payloads are not part of the contract.
::testing::AssertionResult same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return ::testing::AssertionSuccess();
  if (bits(a) == bits(b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " (0x" << std::hex << bits(a) << ") vs " << b << " (0x" << bits(b) << ")";
}

TEST(Iq2Dot, SpecialScalesPropagateIdentically) {
  // f16 weight scales and f32 activation scales that are zero, subnormal, huge, inf or NaN:
  // the float tail (conversion, products, sum) must agree in all three versions.
  constexpr uint16_t kHalf[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x3c00};
  const float kF32[] = {0.f, -0.f, 1e-40f, 3e38f, -1.f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), 0.5f};
  std::mt19937 rng(14);
  const int64_t nb = 4, n = nb * 256;
  for (uint16_t h : kHalf) {
    for (float f : kF32) {
      auto w = random_weight_blocks(rng, nb);
      auto y = q8k_from(gaussian(rng, n, 1.f));
      w[1].d = h;
      y[2].d = f;
      const float ours = vec_dot_iq2_xxs_q8_K_scalar(w.data(), y.data(), n);
      EXPECT_TRUE(same_float(ours, GgmlIq2::get().vec_dot(w.data(), y.data(), n))) << std::hex << h << " " << f;
      if (cpu_has_avx2_fma()) {
        EXPECT_TRUE(same_float(vec_dot_iq2_xxs_q8_K_avx2(w.data(), y.data(), n), ours)) << std::hex << h << " " << f;
      }
    }
  }
}

TEST(Iq2Dot, QuantizedRowsAgreeWithDoublePrecisionDotOfDequantizedRows) {
  // The integer path computes sum_b (d_w*d_x) * bsum_b / 8 where bsum_b is exact. Against the
  // exact dot of the dequantized values (each carrying <= 2 roundings: db = d*(0.5+s)*0.25 and
  // db*grid), the float result has <= 2 roundings per block (d_w*d_x, *bsum) plus nb additions.
  // A bound of 8*eps*(nb + 4) * sum|w_i x_i| covers all of them with margin.
  std::mt19937 rng(13);
  const int64_t n = 4096, nb = n / 256;
  for (int rep = 0; rep < 10; ++rep) {
    const auto wf = gaussian(rng, n, 0.02f);
    std::vector<BlockIQ2_XXS> w(nb);
    quantize_iq2_xxs(wf.data(), w.data(), 1, n, std::vector<float>(n, 1.f).data());
    const auto y = q8k_from(gaussian(rng, n, 1.5f));
    std::vector<float> wd(n);
    dequantize_row_iq2_xxs(w.data(), wd.data(), n);
    double exact = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = static_cast<double>(y[i / 256].d) * y[i / 256].qs[i % 256];
      exact += wd[i] * xi;
      magnitude += std::fabs(wd[i] * xi);
    }
    const float dot = vec_dot_iq2_xxs_q8_K_scalar(w.data(), y.data(), n);
    EXPECT_NEAR(dot, exact, 8 * FLT_EPSILON * (nb + 4) * magnitude) << rep;
    EXPECT_GT(magnitude, 0);
  }
}

TEST(Iq2Dot, EdgeCountsAndBadInput) {
  EXPECT_EQ(vec_dot_iq2_xxs_q8_K_scalar(nullptr, nullptr, 0), 0.f);
  std::vector<BlockIQ2_XXS> w(1);
  std::vector<BlockQ8_K> y(1);
  EXPECT_THROW(vec_dot_iq2_xxs_q8_K_scalar(w.data(), y.data(), 128), Error);
  EXPECT_THROW(vec_dot_iq2_xxs_q8_K_scalar(nullptr, y.data(), 256), Error);
  if (cpu_has_avx2_fma()) {
    EXPECT_EQ(vec_dot_iq2_xxs_q8_K_avx2(nullptr, nullptr, 0), 0.f);
    EXPECT_THROW(vec_dot_iq2_xxs_q8_K_avx2(w.data(), y.data(), 257), Error);
  }
}

}  // namespace
}  // namespace ds4::quant
