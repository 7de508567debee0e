// The codebook writers (IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and the MXFP4 writer must
// give ggml's bytes exactly (libggml-base v0.5.0's quantize_*, after ggml_quantize_init), with
// importance weights (with and without zero entries) and, where ggml allows it, without.
// Rows cover several scales, outliers, exact zeros (whole rows, runs of 16/32 inside a row),
// constants, tiny values, sparse rows, rounding ties and heavy tails; some rows are built so
// that the codebook searches leave the grid often (uniform magnitudes).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "ext_formats.h"

namespace ds4::test {
namespace {

constexpr int64_t kCols = 1024;

std::vector<float> gaussian_vec(std::mt19937& rng, int64_t n, float sigma) {
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> test_matrix(int64_t* nrows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<std::vector<float>> rows;
  for (float sigma : {1e-6f, 1e-3f, 0.02f, 1.f, 300.f}) rows.push_back(gaussian_vec(rng, kCols, sigma));
  auto outliers = gaussian_vec(rng, kCols, 0.05f);
  for (int k = 0; k < 24; ++k) outliers[rng() % kCols] *= (k % 2 ? 60.f : -45.f);
  rows.push_back(outliers);
  rows.push_back(std::vector<float>(kCols, 0.f));
  rows.push_back(std::vector<float>(kCols, 0.75f));
  rows.push_back(std::vector<float>(kCols, -3.f));
  rows.push_back(gaussian_vec(rng, kCols, 1e-30f));
  rows.push_back(gaussian_vec(rng, kCols, 1e-39f));  // subnormal: MXFP4's exponent wraps in ggml
  auto holes = gaussian_vec(rng, kCols, 1.f);  // all-zero sub-blocks of 16 and 32 inside blocks
  for (int64_t i = 0; i < kCols; ++i)
    if ((i >= 32 && i < 64) || (i >= 304 && i < 320) || (i >= 512 + 96 && i < 512 + 160)) holes[i] = 0.f;
  rows.push_back(holes);
  std::vector<float> p(kCols), m(kCols), flat(kCols);
  for (int64_t i = 0; i < kCols; ++i) {
    p[i] = u(rng);
    m[i] = -2.f * u(rng);
    flat[i] = (rng() % 2 ? 1.f : -1.f) * (0.5f + u(rng));  // magnitudes spread evenly: off-grid often
  }
  rows.push_back(p);
  rows.push_back(m);
  rows.push_back(flat);
  auto sparse = gaussian_vec(rng, kCols, 1.f);
  for (int64_t i = 0; i < kCols; ++i)
    if ((i / 16) % 3 == 0 || rng() % 4) sparse[i] = 0.f;
  rows.push_back(sparse);
  auto ties = gaussian_vec(rng, kCols, 1.f);
  for (auto& v : ties) v = std::round(v * 4.f) / 4.f;  // many equal values: IQ1's sort order
  rows.push_back(ties);
  std::vector<float> pow2(kCols);  // block maxima at and just below powers of two (MXFP4)
  for (int64_t i = 0; i < kCols; ++i)
    pow2[i] = i % 32 == 0 ? std::ldexp(i % 64 ? 1.f : std::nextafter(1.f, 0.f), static_cast<int>(i / 64) - 8)
                          : 0.1f * gaussian_vec(rng, 1, 1.f)[0];
  rows.push_back(pow2);
  for (int r = 0; r < 14; ++r) {  // varied shapes and scales
    const float scale = std::pow(10.f, -6.f + 9.f * u(rng));
    std::vector<float> row(kCols);
    for (auto& v : row) {
      const float g = gaussian_vec(rng, 1, 1.f)[0];
      v = (r % 3 == 0 ? std::log(u(rng) + 1e-7f) : r % 3 == 1 ? g : g * g * g) * scale;
    }
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

struct Writer {
  GgmlType type;
  const char* name;
  bool needs_imatrix;
};
const Writer kWriters[] = {{GgmlType::IQ2_XS, "iq2_xs", true},  {GgmlType::IQ2_S, "iq2_s", false},
                           {GgmlType::IQ3_XXS, "iq3_xxs", false}, {GgmlType::IQ3_S, "iq3_s", false},
                           {GgmlType::IQ1_S, "iq1_s", true},   {GgmlType::IQ1_M, "iq1_m", false}};

void ggml_init(GgmlType type) {
  static auto init = ggml_fn<void (*)(int)>("ggml_quantize_init");
  init(static_cast<int>(type));  // builds ggml's grid maps once per type
}

void expect_same_bytes(GgmlType type, const char* name, const float* imatrix, uint32_t seed) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, seed);
  const size_t rb = row_bytes(traits(type), kCols), bytes = static_cast<size_t>(nrows) * rb;
  std::vector<uint8_t> want(bytes, 0xAA), got(bytes, 0x55);
  ggml_init(type);
  auto oracle = ggml_fn<GgmlQuant::Quant>((std::string("quantize_") + name).c_str());
  ASSERT_EQ(oracle(x.data(), want.data(), nrows, kCols, imatrix), bytes);
  ASSERT_EQ(quant::quantize_rows(type, x.data(), got.data(), nrows, kCols, imatrix), bytes);
  const int64_t bad = first_byte_mismatch(got, want);
  ASSERT_EQ(bad, -1) << name << (imatrix ? " weighted" : " unweighted") << " seed " << seed << ": row "
                     << bad / static_cast<int64_t>(rb) << " byte " << bad % static_cast<int64_t>(rb) << ": got "
                     << int(got[bad]) << " want " << int(want[bad]);
}

// One test for all byte comparisons: ggml builds its search tables once per process (about 20 s
// on 2 cores for all six types), and ctest runs every test in its own process.
TEST(IqWriters, MatchGgml) {
  const auto imp = importance(41, false), impz = importance(42, true);
  const std::vector<float> ones(kCols, 1.f);  // all-ones: the converter's default imatrix
  for (const auto& w : kWriters) {
    expect_same_bytes(w.type, w.name, imp.data(), 43);
    expect_same_bytes(w.type, w.name, impz.data(), 44);
    expect_same_bytes(w.type, w.name, ones.data(), 45);
    EXPECT_EQ(quant::needs_imatrix(w.type), w.needs_imatrix) << w.name;
    if (w.needs_imatrix) continue;  // ggml asserts without importance weights
    expect_same_bytes(w.type, w.name, nullptr, 46);
    expect_same_bytes(w.type, w.name, nullptr, 47);
  }
}

TEST(IqWriters, RequiredImatrixIsAnError) {
  const std::vector<float> x(kCols, 1.f);
  std::vector<uint8_t> out(row_bytes(traits(GgmlType::IQ1_S), kCols) * 2);
  for (GgmlType t : {GgmlType::IQ2_XS, GgmlType::IQ1_S}) {
    try {
      quant::quantize_rows(t, x.data(), out.data(), 1, kCols, nullptr);
      ADD_FAILURE() << traits(t).name << " quantized without an importance matrix";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("importance matrix is required"), std::string::npos) << e.what();
    }
  }
}

TEST(IqWriters, BadInputIsAnError) {
  std::vector<float> x(kCols, 1.f), imp(kCols, 1.f);
  std::vector<uint8_t> out(row_bytes(traits(GgmlType::IQ3_S), kCols));
  x[300] = NAN;
  for (const auto& w : kWriters) EXPECT_THROW(quant::quantize_rows(w.type, x.data(), out.data(), 1, kCols, imp.data()), Error);
  x[300] = 1.f;
  imp[7] = -1.f;
  for (const auto& w : kWriters) EXPECT_THROW(quant::quantize_rows(w.type, x.data(), out.data(), 1, kCols, imp.data()), Error);
  // Values whose squares overflow float: ggml would compute on infinities.
  imp[7] = 1.f;
  x[5] = 3e38f;
  for (const auto& w : kWriters) EXPECT_THROW(quant::quantize_rows(w.type, x.data(), out.data(), 1, kCols, imp.data()), Error);
  EXPECT_THROW(quant::quantize_rows(GgmlType::IQ1_M, x.data(), out.data(), 1, 1000, imp.data()), Error);  // not x256
}

TEST(IqWriters, Mxfp4MatchesGgml) {
  int64_t nrows = 0;
  const auto x = test_matrix(&nrows, 48);
  const size_t bytes = static_cast<size_t>(nrows) * row_bytes(traits(GgmlType::MXFP4), kCols);
  std::vector<uint8_t> want(bytes, 0xAA), got(bytes, 0x55);
  auto oracle = ggml_fn<GgmlQuant::Quant>("quantize_mxfp4");
  const auto imp = importance(49, false);
  ASSERT_EQ(oracle(x.data(), want.data(), nrows, kCols, nullptr), bytes);
  ASSERT_EQ(quant::quantize_rows(GgmlType::MXFP4, x.data(), got.data(), nrows, kCols, imp.data()), bytes);  // ignored
  const int64_t bad = first_byte_mismatch(got, want);
  ASSERT_EQ(bad, -1) << "byte " << bad << ": got " << int(got[bad]) << " want " << int(want[bad]);
}

}  // namespace
}  // namespace ds4::test
