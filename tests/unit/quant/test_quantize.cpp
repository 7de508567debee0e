// Encoding the same float rows must give ggml's bytes exactly: weight writers (Q8_0, Q2_K,
// Q4_K; with and without importance weights), activation quantizers (Q8_0, Q8_K _ref rules)
// and F16/BF16 rows. Rows cover several scales, outliers, zeros, constants, tiny values.
#include <gtest/gtest.h>

#include "ggml_quant.h"
#include "quant/quant.h"

namespace ds4::test {
namespace {

constexpr int64_t kCols = 1024;  // 4 super-blocks, 32 Q8_0 blocks per row

// One row per kind of data; a test quantizes them all as one matrix.
std::vector<float> test_matrix(int64_t* nrows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<float>> rows;
  for (float sigma : {1e-6f, 1e-3f, 0.02f, 1.f, 300.f}) rows.push_back(gaussian_row(rng, kCols, sigma));
  {
    auto r = gaussian_row(rng, kCols, 0.05f);  // outliers, a few per block
    for (int k = 0; k < 24; ++k) r[rng() % kCols] *= (k % 2 ? 60.f : -45.f);
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(kCols, 0.f));
  rows.push_back(std::vector<float>(kCols, 0.75f));
  rows.push_back(std::vector<float>(kCols, -3.f));
  rows.push_back(gaussian_row(rng, kCols, 1e-30f));  // tiny: f16 scales underflow
  rows.push_back(gaussian_row(rng, kCols, 1e-39f));  // float denormals: scale searches overflow
  {
    std::uniform_real_distribution<float> u(0.f, 1.f);  // all positive, then all negative
    std::vector<float> p(kCols), m(kCols);
    for (int64_t i = 0; i < kCols; ++i) p[i] = u(rng), m[i] = -2.f * u(rng);
    rows.push_back(p);
    rows.push_back(m);
  }
  {
    auto r = gaussian_row(rng, kCols, 1.f);  // sparse, with whole zero sub-blocks
    for (int64_t i = 0; i < kCols; ++i)
      if ((i / 16) % 3 == 0 || rng() % 4) r[i] = 0.f;
    rows.push_back(r);
  }
  {
    auto r = gaussian_row(rng, kCols, 1.f);  // values on a coarse grid: exact ties for rounding
    for (auto& v : r) v = std::round(v * 8.f) / 8.f;
    rows.push_back(r);
  }
  std::vector<float> m;
  for (auto& r : rows) m.insert(m.end(), r.begin(), r.end());
  *nrows = static_cast<int64_t>(rows.size());
  return m;
}

std::vector<float> importance(uint32_t seed, bool with_zeros) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> e(1.f);
  std::vector<float> w(kCols);
  for (auto& v : w) v = with_zeros && rng() % 5 == 0 ? 0.f : e(rng) + 1e-3f;
  return w;
}

void expect_same_bytes(GgmlType type, GgmlQuant::Quant oracle, const float* imatrix, uint32_t seed) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, seed);
  const size_t bytes = static_cast<size_t>(nrows) * row_bytes(traits(type), kCols);
  std::vector<uint8_t> want(bytes, 0xAA), got(bytes, 0x55);
  EXPECT_EQ(oracle(x.data(), want.data(), nrows, kCols, imatrix), bytes);
  EXPECT_EQ(quant::quantize_rows(type, x.data(), got.data(), nrows, kCols, imatrix), bytes);
  const int64_t bad = first_byte_mismatch(got, want);
  const size_t rb = row_bytes(traits(type), kCols);
  ASSERT_EQ(bad, -1) << "row " << bad / static_cast<int64_t>(rb) << " byte " << bad % static_cast<int64_t>(rb)
                     << ": got " << int(got[bad]) << " want " << int(want[bad]);
}

TEST(Quantize, Q8_0WeightsMatchGgml) {
  expect_same_bytes(GgmlType::Q8_0, GgmlQuant::get().quantize_q8_0, nullptr, 21);
  const auto w = importance(22, false);  // ignored by both
  expect_same_bytes(GgmlType::Q8_0, GgmlQuant::get().quantize_q8_0, w.data(), 23);
}

TEST(Quantize, Q2_KReferenceMatchesGgml) {
  for (uint32_t seed : {31u, 32u}) expect_same_bytes(GgmlType::Q2_K, GgmlQuant::get().quantize_q2_K, nullptr, seed);
}

TEST(Quantize, Q2_KWeightedMatchesGgml) {
  const auto w = importance(33, false), wz = importance(34, true);
  expect_same_bytes(GgmlType::Q2_K, GgmlQuant::get().quantize_q2_K, w.data(), 35);
  expect_same_bytes(GgmlType::Q2_K, GgmlQuant::get().quantize_q2_K, wz.data(), 36);
}

TEST(Quantize, Q4_KReferenceMatchesGgml) {
  for (uint32_t seed : {41u, 42u}) expect_same_bytes(GgmlType::Q4_K, GgmlQuant::get().quantize_q4_K, nullptr, seed);
}

TEST(Quantize, Q4_KWeightedMatchesGgml) {
  const auto w = importance(43, false), wz = importance(44, true);
  expect_same_bytes(GgmlType::Q4_K, GgmlQuant::get().quantize_q4_K, w.data(), 45);
  expect_same_bytes(GgmlType::Q4_K, GgmlQuant::get().quantize_q4_K, wz.data(), 46);
}

// Many rows whose scale spans 1e-8 .. 1e4 and whose shape varies (Gaussian, uniform,
// Laplace-like, Student-t-like heavy tails, skewed), each encoded with and without a fresh
// random importance vector: any operation-order slip in the scale searches shows up here.
TEST(Quantize, ManyRandomRowsMatchGgml) {
  std::mt19937 rng(71);
  const int64_t rows = 48, cols = 512;
  std::vector<float> x(rows * cols);
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.f, -8.f + 12.f * u01(rng));
    for (int64_t c = 0; c < cols; ++c) {
      float v = 0;
      switch (r % 5) {
        case 0: v = nd(rng); break;
        case 1: v = 2.f * u01(rng) - 1.f; break;
        case 2: v = std::log(u01(rng) + 1e-7f) * (rng() % 2 ? 1.f : -1.f); break;
        case 3: v = nd(rng) / std::sqrt(std::fabs(nd(rng)) + 1e-3f); break;
        default: v = std::exp(nd(rng)) - 0.5f; break;
      }
      x[r * cols + c] = v * scale;
    }
  }
  std::vector<float> imp(cols);
  for (auto& v : imp) v = std::pow(u01(rng), 3.f) * 50.f;
  const auto& g = GgmlQuant::get();
  const std::pair<GgmlType, GgmlQuant::Quant> kinds[] = {
      {GgmlType::Q8_0, g.quantize_q8_0}, {GgmlType::Q2_K, g.quantize_q2_K}, {GgmlType::Q4_K, g.quantize_q4_K}};
  for (const auto& [type, oracle] : kinds)
    for (const float* im : {static_cast<const float*>(nullptr), static_cast<const float*>(imp.data())}) {
      const size_t bytes = static_cast<size_t>(rows) * row_bytes(traits(type), cols);
      std::vector<uint8_t> want(bytes, 0), got(bytes, 1);
      oracle(x.data(), want.data(), rows, cols, im);
      quant::quantize_rows(type, x.data(), got.data(), rows, cols, im);
      const int64_t bad = first_byte_mismatch(got, want);
      EXPECT_EQ(bad, -1) << traits(type).name << (im ? " weighted" : " reference") << " row "
                         << bad / static_cast<int64_t>(row_bytes(traits(type), cols));
    }
}

TEST(Quantize, ActivationQ8_0MatchesReference) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, 51);
  for (int64_t r = 0; r < nrows; ++r) {
    std::vector<uint8_t> want(34 * kCols / 32, 0), got(34 * kCols / 32, 1);
    GgmlQuant::get().quantize_row_q8_0_ref(x.data() + r * kCols, want.data(), kCols);
    quant::quantize_activation_row(GgmlType::Q8_0, x.data() + r * kCols, got.data(), kCols);
    ASSERT_EQ(first_byte_mismatch(got, want), -1) << "row " << r;
  }
}

TEST(Quantize, ActivationQ8_KMatchesReference) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, 52);
  for (int64_t r = 0; r < nrows; ++r) {
    // ggml leaves bsums of an all-zero block unwritten; zero-filling its buffer makes the
    // comparison meaningful (DwarfStar writes zeros there).
    std::vector<uint8_t> want(292 * kCols / 256, 0), got(292 * kCols / 256, 0xCD);
    GgmlQuant::get().quantize_row_q8_K_ref(x.data() + r * kCols, want.data(), kCols);
    quant::quantize_activation_row(GgmlType::Q8_K, x.data() + r * kCols, got.data(), kCols);
    ASSERT_EQ(first_byte_mismatch(got, want), -1) << "row " << r;
  }
}

TEST(Quantize, HalfAndBf16RowsMatchGgml) {
  int64_t nrows = 0;
  auto x = test_matrix(&nrows, 61);
  x[3] = NAN, x[5] = -INFINITY, x[7] = 1e-42f, x[9] = 70000.f;  // conversions pass these through
  const int64_t n = nrows * kCols;
  std::vector<uint16_t> want(n), got(n);
  GgmlQuant::get().fp32_to_fp16_row(x.data(), want.data(), n);
  EXPECT_EQ(quant::quantize_rows(GgmlType::F16, x.data(), got.data(), nrows, kCols, nullptr), 2 * static_cast<size_t>(n));
  EXPECT_TRUE(got == want);
  GgmlQuant::get().fp32_to_bf16_row_ref(x.data(), want.data(), n);
  quant::quantize_rows(GgmlType::BF16, x.data(), got.data(), nrows, kCols, nullptr);
  EXPECT_TRUE(got == want);
}

}  // namespace
}  // namespace ds4::test
