// The CPU backend's activation rounding (act_round: quant's AVX-512 fast paths plus the
// reference for what they leave) must give compute/numerics.h's floats bit for bit: every
// tie between two grid values and its float neighbours, subnormal codes, zeros of both signs,
// block scales from tiny to huge, NaN and infinity inside a block, partial trailing blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compute/backend.h"
#include "compute/numerics.h"
#include "quant/quant.h"

namespace ds4::compute {
namespace {

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// Every finite E4M3 / E2M1 magnitude, ascending.
std::vector<float> grid(bool fp8) {
  std::vector<float> g;
  if (fp8) {
    for (int m = 0; m < 8; ++m) g.push_back(std::ldexp(static_cast<float>(m), -9));
    for (int e = 1; e < 16; ++e)
      for (int m = 0; m < 8; ++m) {
        const float v = std::ldexp(1.0f + m / 8.0f, e - 7);
        if (v <= 448.0f) g.push_back(v);
      }
  } else {
    g = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  }
  return g;
}

// Values that test the rounding: grid points, midpoints and their float neighbours, with both
// signs, scaled by s (a power of two).
std::vector<float> edge_values(bool fp8, float s) {
  const auto g = grid(fp8);
  std::vector<float> v;
  for (size_t i = 0; i < g.size(); ++i) {
    v.push_back(g[i]);
    if (i + 1 < g.size()) {
      const float mid = (g[i] + g[i + 1]) / 2;
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, 1e9f));
    }
  }
  std::vector<float> out;
  for (float x : v) {
    out.push_back(x * s);
    out.push_back(-x * s);
  }
  return out;
}

void expect_same(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    ASSERT_EQ(bits_of(want[i]), bits_of(got[i])) << what << " element " << i << " want " << want[i] << " got " << got[i];
  }
}

// Rows through the backend (one row of `len` rounded values per call) against the reference.
void check_rows(Backend& be, ActRound kind, const std::vector<float>& x, int64_t len, const char* what) {
  const int64_t rows = static_cast<int64_t>(x.size()) / len;
  std::vector<float> want = x, got = x;
  for (int64_t r = 0; r < rows; ++r) {
    float* w = want.data() + r * len;
    if (kind == ActRound::Fp8) {
      fp8_e4m3_round_trip(w, len);
    } else {
      hadamard_transform(w, len);
      fp4_e2m1_round_trip(w, len);
    }
  }
  be.act_round(got.data(), rows, len, len, kind);
  expect_same(want, got, what);
}

TEST(ActRound, FastPathsEqualTheReference) {
  auto be = make_cpu_backend(nullptr, {});
  std::mt19937 rng(1616);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (bool fp8 : {true, false}) {
    const ActRound kind = fp8 ? ActRound::Fp8 : ActRound::HadamardFp4;
    const int64_t block = fp8 ? 64 : 32, len = fp8 ? 448 : 128;
    // Blocks whose scale is s: the block maximum is the grid's top times s, every other entry an
    // edge value times s. (The FP4 rows go through the Hadamard transform first, so for them
    // this only spreads the values; the exact ties are checked by the no-Hadamard test below.)
    for (int e = -30; e <= 30; e += 3) {
      const float s = std::ldexp(1.0f, e);
      auto edges = edge_values(fp8, s);
      std::vector<float> x;
      size_t k = 0;
      while (static_cast<int64_t>(x.size()) < 4 * len) {
        if (static_cast<int64_t>(x.size()) % block == 0) x.push_back((fp8 ? 448.0f : 6.0f) * s);
        else x.push_back(edges[k++ % edges.size()]);
      }
      check_rows(*be, kind, x, len, fp8 ? "fp8 edges" : "fp4 edges");
    }
    // Random rows of several magnitudes, zeros of both signs, subnormals.
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> x(static_cast<size_t>(3 * len));
      const int kind_of_row = rep % 5;
      for (auto& v : x) {
        switch (kind_of_row) {
          case 0: v = nd(rng); break;
          case 1: v = std::ldexp(nd(rng), static_cast<int>(rng() % 200) - 100); break;
          case 2: v = (rng() % 3 == 0) ? (rng() % 2 ? 0.0f : -0.0f) : nd(rng) * 1e-3f; break;
          case 3: v = std::ldexp(nd(rng), -140); break;  // subnormal inputs
          default: v = std::ldexp(nd(rng), 120); break;
        }
      }
      check_rows(*be, kind, x, len, fp8 ? "fp8 random" : "fp4 random");
    }
    // A NaN and an infinity inside some blocks: the reference handles those blocks and the rest.
    std::vector<float> x(static_cast<size_t>(2 * len));
    for (auto& v : x) v = nd(rng);
    x[static_cast<size_t>(block + 5)] = std::numeric_limits<float>::quiet_NaN();
    x[static_cast<size_t>(len + 2 * block + 1)] = -std::numeric_limits<float>::infinity();
    check_rows(*be, kind, x, len, fp8 ? "fp8 non-finite" : "fp4 non-finite");
  }
}

// The quant layer's round trips alone (no Hadamard), on exact ties, and with a partial
// trailing block, against the reference on the same rows.
TEST(ActRound, RoundTripPrefixesEqualTheReferenceOnTies) {
  for (bool fp8 : {true, false}) {
    const int64_t block = fp8 ? 64 : 32;
    for (int e = -20; e <= 20; e += 5) {
      const float s = std::ldexp(1.0f, e);
      auto edges = edge_values(fp8, s);
      for (int64_t n : {block, 3 * block, 3 * block + 7, 5 * block - 1}) {
        std::vector<float> x;
        size_t k = 0;
        while (static_cast<int64_t>(x.size()) < n) {
          if (static_cast<int64_t>(x.size()) % block == 0) x.push_back((fp8 ? 448.0f : 6.0f) * s);
          else x.push_back(edges[k++ % edges.size()]);
        }
        std::vector<float> want = x, got = x;
        if (fp8) fp8_e4m3_round_trip(want.data(), n);
        else fp4_e2m1_round_trip(want.data(), n);
        const int64_t done = fp8 ? quant::fp8_e4m3_round_trip_prefix(got.data(), n) : quant::fp4_e2m1_round_trip_prefix(got.data(), n);
        ASSERT_TRUE(done >= 0 && done <= n && (done == n || done % block == 0)) << "done " << done << " of " << n;
        if (done < n) {
          if (fp8) fp8_e4m3_round_trip(got.data() + done, n - done);
          else fp4_e2m1_round_trip(got.data() + done, n - done);
        }
        expect_same(want, got, fp8 ? "fp8 ties" : "fp4 ties");
        if (quant::have_avx512_vnni()) {
          EXPECT_EQ(done, n) << "the AVX-512 path should take every finite block";
        }
      }
    }
  }
}

TEST(ActRound, HadamardFastEqualsReference) {
  std::mt19937 rng(1617);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {16, 32, 64, 128, 512, 1024}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = std::ldexp(nd(rng), static_cast<int>(rng() % 40) - 20);
    std::vector<float> want = x, got = x;
    hadamard_transform(want.data(), n);
    const bool fast = quant::hadamard_transform_fast(got.data(), n);
    if (!fast) {
      EXPECT_FALSE(quant::have_avx512_vnni()) << "n " << n;
      continue;
    }
    expect_same(want, got, "hadamard");
  }
  std::vector<float> x(8, 1.0f), y = x;
  EXPECT_FALSE(quant::hadamard_transform_fast(x.data(), 8));  // below one vector: reference only
  EXPECT_EQ(x, y);
}

}  // namespace
}  // namespace ds4::compute
