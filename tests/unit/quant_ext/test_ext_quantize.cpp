// Encoding the same float rows must give ggml's bytes exactly, with and without importance
// weights: Q4_0, Q5_0, Q5_1, Q3_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; and Q8_1 activations (quantize_row_q8_1_ref).
// Rows cover several scales, outliers, zeros, constants, tiny values and exact rounding ties.
#include <gtest/gtest.h>

#include "ext_formats.h"

namespace ds4::test {
namespace {

constexpr int64_t kCols = 1024;

std::vector<float> test_matrix(int64_t* nrows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<float>> rows;
  for (float sigma : {1e-6f, 1e-3f, 0.02f, 1.f, 300.f}) rows.push_back(gaussian_row(rng, kCols, sigma));
  auto outliers = gaussian_row(rng, kCols, 0.05f);
  for (int k = 0; k < 24; ++k) outliers[rng() % kCols] *= (k % 2 ? 60.f : -45.f);
  rows.push_back(outliers);
  rows.push_back(std::vector<float>(kCols, 0.f));
  rows.push_back(std::vector<float>(kCols, 0.75f));
  rows.push_back(std::vector<float>(kCols, -3.f));
  rows.push_back(gaussian_row(rng, kCols, 1e-30f));
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> p(kCols), m(kCols);
  for (int64_t i = 0; i < kCols; ++i) p[i] = u(rng), m[i] = -2.f * u(rng);
  rows.push_back(p);
  rows.push_back(m);
  auto sparse = gaussian_row(rng, kCols, 1.f);
  for (int64_t i = 0; i < kCols; ++i)
    if ((i / 16) % 3 == 0 || rng() % 4) sparse[i] = 0.f;
  rows.push_back(sparse);
  auto ties = gaussian_row(rng, kCols, 1.f);
  for (auto& v : ties) v = std::round(v * 8.f) / 8.f;
  rows.push_back(ties);
  for (int r = 0; r < 12; ++r) {  // varied shapes and scales
    const float scale = std::pow(10.f, -6.f + 9.f * u(rng));
    std::vector<float> row(kCols);
    for (auto& v : row) v = (r % 2 ? std::log(u(rng) + 1e-7f) : gaussian_row(rng, 1, 1.f)[0]) * scale;
    rows.push_back(row);
  }
  std::vector<float> out;
  for (auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  *nrows = static_cast<int64_t>(rows.size());
  return out;
}

std::vector<float> importance(uint32_t seed, bool with_zeros) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> e(1.f);
  std::vector<float> w(kCols);
  for (auto& v : w) v = with_zeros && rng() % 5 == 0 ? 0.f : e(rng) + 1e-3f;
  return w;
}

void expect_same_bytes(GgmlType type, const char* name, const float* imatrix, uint32_t seed) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, seed);
  const size_t rb = row_bytes(traits(type), kCols), bytes = static_cast<size_t>(nrows) * rb;
  std::vector<uint8_t> want(bytes, 0xAA), got(bytes, 0x55);
  auto oracle = ggml_fn<GgmlQuant::Quant>((std::string("quantize_") + name).c_str());
  EXPECT_EQ(oracle(x.data(), want.data(), nrows, kCols, imatrix), bytes);
  EXPECT_EQ(quant::quantize_rows(type, x.data(), got.data(), nrows, kCols, imatrix), bytes);
  const int64_t bad = first_byte_mismatch(got, want);
  ASSERT_EQ(bad, -1) << name << (imatrix ? " weighted" : " reference") << ": row " << bad / static_cast<int64_t>(rb)
                     << " byte " << bad % static_cast<int64_t>(rb) << ": got " << int(got[bad]) << " want " << int(want[bad]);
}

struct Writer {
  GgmlType type;
  const char* name;
};
const Writer kWriters[] = {{GgmlType::Q4_0, "q4_0"}, {GgmlType::Q5_0, "q5_0"}, {GgmlType::Q5_1, "q5_1"},
                           {GgmlType::Q3_K, "q3_K"}, {GgmlType::Q5_K, "q5_K"}, {GgmlType::Q6_K, "q6_K"},
                           {GgmlType::IQ4_NL, "iq4_nl"}, {GgmlType::IQ4_XS, "iq4_xs"}};

TEST(QuantizeExt, ReferenceWritersMatchGgml) {
  for (const auto& w : kWriters)
    for (uint32_t seed : {11u, 12u}) expect_same_bytes(w.type, w.name, nullptr, seed);
}

TEST(QuantizeExt, WeightedWritersMatchGgml) {
  const auto imp = importance(21, false), impz = importance(22, true);
  for (const auto& w : kWriters) {
    expect_same_bytes(w.type, w.name, imp.data(), 23);
    expect_same_bytes(w.type, w.name, impz.data(), 24);
  }
}

TEST(QuantizeExt, ActivationQ8_1MatchesReference) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, 31);
  auto ref = ggml_fn<GgmlQuant::RowQuant>("quantize_row_q8_1_ref");
  for (int64_t r = 0; r < nrows; ++r) {
    std::vector<uint8_t> want(36 * kCols / 32, 0), got(36 * kCols / 32, 1);
    ref(x.data() + r * kCols, want.data(), kCols);
    quant::quantize_activation_row(GgmlType::Q8_1, x.data() + r * kCols, got.data(), kCols);
    ASSERT_EQ(first_byte_mismatch(got, want), -1) << "row " << r;
  }
}

}  // namespace
}  // namespace ds4::test
