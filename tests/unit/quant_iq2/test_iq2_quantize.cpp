// IQ2_XXS quantization: byte-identical to ggml's quantize_iq2_xxs (with an importance matrix,
// which ggml requires), on Gaussian rows, outliers, zero rows and several importance patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ggml_iq2.h"
#include "quant/iq2_xxs.h"

namespace ds4::quant {
namespace {

using test::GgmlIq2;
using test::gaussian;

struct Case {
  std::string name;
  int64_t nrows;
  int64_t n_per_row;
  std::vector<float> x;
  std::vector<float> imatrix;
};

// Quantizes with both implementations and compares every byte; reports the first bad blocks.
void expect_same_bytes(const Case& c) {
  SCOPED_TRACE(c.name);
  const size_t bytes = static_cast<size_t>(c.nrows * c.n_per_row / 256 * 66);
  std::vector<uint8_t> ours(bytes, 0xAA), ref(bytes, 0x55);
  EXPECT_EQ(quantize_iq2_xxs(c.x.data(), ours.data(), c.nrows, c.n_per_row, c.imatrix.data()), bytes);
  EXPECT_EQ(GgmlIq2::get().quantize_rows(c.x.data(), ref.data(), c.nrows, c.n_per_row, c.imatrix.data()), bytes);
  int bad = 0;
  for (size_t b = 0; b < bytes / 66; ++b) {
    if (std::memcmp(ours.data() + 66 * b, ref.data() + 66 * b, 66) != 0 && ++bad <= 3)
      ADD_FAILURE() << "block " << b << " differs from ggml";
  }
  EXPECT_EQ(bad, 0) << "of " << bytes / 66 << " blocks";
}

std::vector<float> uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void gaussian_rows_of_several_scales() {
  std::mt19937 rng(42);
  const int64_t n = 2048;
  for (float sigma : {1e-4f, 0.02f, 1.0f, 40.0f}) {
    Case c{"gaussian sigma=" + std::to_string(sigma), 3, n, gaussian(rng, 3 * n, sigma), uniform(rng, n, 0.01f, 5.f)};
    expect_same_bytes(c);
  }
}

void importance_patterns() {
  std::mt19937 rng(7);
  const int64_t n = 1024;
  const auto x = gaussian(rng, 2 * n, 0.05f);
  expect_same_bytes({"all-ones importance", 2, n, x, std::vector<float>(n, 1.f)});
  // Typical imatrix: squared activations, heavy-tailed across channels.
  auto heavy = gaussian(rng, n, 1.f);
  for (auto& v : heavy) v = v * v * v * v + 1e-6f;
  expect_same_bytes({"heavy-tailed importance", 2, n, x, heavy});
  // Some channels never activated (zero importance), including a whole 32-weight group.
  auto sparse = uniform(rng, n, 0.f, 3.f);
  for (int64_t i = 0; i < n; i += 5) sparse[i] = 0.f;
  for (int i = 64; i < 96; ++i) sparse[i] = 0.f;
  expect_same_bytes({"importance with zeros", 2, n, x, sparse});
}

void outliers_zeros_and_tiny_values() {
  std::mt19937 rng(99);
  const int64_t n = 1024;
  const auto imatrix = uniform(rng, n, 0.1f, 2.f);
  auto outliers = gaussian(rng, 4 * n, 0.01f);
  std::uniform_int_distribution<int64_t> pos(0, 4 * n - 1);
  for (int k = 0; k < 40; ++k) outliers[pos(rng)] = (k % 2 ? 1.f : -1.f) * (0.5f + 0.1f * k);
  expect_same_bytes({"outliers", 4, n, outliers, imatrix});

  std::vector<float> zeros(2 * n, 0.f);
  expect_same_bytes({"all-zero rows", 2, n, zeros, imatrix});

  // Row 0: one zero block and one block of values below ggml's 1e-15 group threshold, rest
  // Gaussian. Row 1: negative-only values (every group has 8 negatives: even sign count) and
  // a block where each group has exactly one negative (odd count: one sign must be dropped).
  auto mixed = gaussian(rng, 2 * n, 0.3f);
  for (int i = 0; i < 256; ++i) mixed[i] = 0.f;
  for (int i = 256; i < 512; ++i) mixed[i] = 1e-17f * static_cast<float>(i % 7);
  for (int64_t i = n; i < n + 256; ++i) mixed[i] = -std::fabs(mixed[i]);
  for (int64_t i = n + 256; i < n + 512; ++i) mixed[i] = (i % 8 == 3) ? -std::fabs(mixed[i]) : std::fabs(mixed[i]);
  expect_same_bytes({"mixed edge blocks", 2, n, mixed, imatrix});

  // Constant and +-constant rows: many ties in the grid search.
  std::vector<float> constant(n, 0.25f);
  for (int64_t i = 0; i < n; i += 3) constant[i] = -0.25f;
  expect_same_bytes({"constant magnitudes", 1, n, constant, std::vector<float>(n, 1.f)});
}

void many_random_rows() {
  // Broad sweep: rows with random scale and random importance, 4096 wide like DeepSeek's
  // expert gate/up rows.
  std::mt19937 rng(2024);
  const int64_t n = 4096, rows = 12;
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    const float sigma = std::exp(std::uniform_real_distribution<float>(-8.f, 2.f)(rng));
    const auto row = gaussian(rng, n, sigma);
    x.insert(x.end(), row.begin(), row.end());
  }
  expect_same_bytes({"random rows", rows, n, x, uniform(rng, n, 0.f, 1.f)});
}

void heavy_tailed_and_skewed_rows() {
  // Laplace, Student-t(3) and shifted-uniform rows stress sign flips, outliers and the
  // neighbour search differently from Gaussians.
  std::mt19937 rng(31337);
  const int64_t n = 2048, rows = 6;
  std::vector<float> x;
  std::exponential_distribution<float> expo(30.f);
  std::student_t_distribution<float> student(3.f);
  std::uniform_real_distribution<float> unit(-0.2f, 1.f);
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float v = r % 3 == 0 ? (i % 2 ? 1.f : -1.f) * expo(rng) : r % 3 == 1 ? 0.01f * student(rng) : 0.05f * unit(rng);
      x.push_back(v);
    }
  }
  auto imatrix = gaussian(rng, n, 1.f);
  for (auto& v : imatrix) v = v * v;
  expect_same_bytes({"heavy-tailed and skewed rows", rows, n, x, imatrix});
}

// One test for all ggml comparisons: ggml builds its IQ2_XXS search tables once per process
// (about a second), and ctest runs every TEST in a process of its own.
TEST(Iq2Quantize, MatchesGgmlByteForByte) {
  gaussian_rows_of_several_scales();
  importance_patterns();
  outliers_zeros_and_tiny_values();
  many_random_rows();
  heavy_tailed_and_skewed_rows();
}

TEST(Iq2Quantize, ReconstructionErrorIsPlausible) {
  // Not an oracle comparison (the byte tests are): a sanity bound that catches a codec that
  // round-trips to garbage. IQ2_XXS on Gaussian data keeps the relative RMS error near 0.3.
  std::mt19937 rng(5);
  const int64_t n = 4096;
  const auto x = gaussian(rng, n, 0.1f);
  std::vector<uint8_t> q(n / 256 * 66);
  quantize_iq2_xxs(x.data(), q.data(), 1, n, std::vector<float>(n, 1.f).data());
  std::vector<float> y(n);
  dequantize_row_iq2_xxs(q.data(), y.data(), n);
  double err = 0, sig = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
    sig += x[i] * static_cast<double>(x[i]);
  }
  EXPECT_LT(std::sqrt(err / sig), 0.45);
}

TEST(Iq2Quantize, NullImatrixIsRefusedLikeGgml) {
  std::vector<float> x(256, 1.f);
  std::vector<uint8_t> q(66);
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 1, 256, nullptr), Error);
  // ggml aborts in that case (GGML_ASSERT in quantize_row_iq2_xxs_impl).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("GGML_NO_BACKTRACE", "1", 1);  // ggml would otherwise attach gdb to print a backtrace
  EXPECT_DEATH(GgmlIq2::get().quantize(x.data(), q.data(), 1, 256, nullptr), "missing quantization weights");
}

TEST(Iq2Quantize, RejectsBadInput) {
  std::vector<float> x(512, 0.5f), w(512, 1.f);
  std::vector<uint8_t> q(2 * 66);
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 1, 300, w.data()), Error);
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), -1, 256, w.data()), Error);
  EXPECT_THROW(quantize_iq2_xxs(nullptr, q.data(), 1, 256, w.data()), Error);
  x[300] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 2, 256, w.data()), Error);
  x[300] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 2, 256, w.data()), Error);
  x[300] = 0.5f;
  w[17] = -1.f;
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 2, 256, w.data()), Error);
  w[17] = 1.f;
  x[3] = 3e19f;  // squares overflow float
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 2, 256, w.data()), Error);
  x[3] = 2e7f;  // finite arithmetic, but the block scale is beyond f16
  EXPECT_THROW(quantize_iq2_xxs(x.data(), q.data(), 2, 256, w.data()), Error);
  EXPECT_EQ(quantize_iq2_xxs(x.data(), q.data(), 0, 256, w.data()), 0u);
}

}  // namespace
}  // namespace ds4::quant
