// Spec-derived checks of the activation rounding steps, the Hadamard transform, RoPE/YaRN
// frequencies and the hyper-connection Sinkhorn split. Expected values come from the spec's
// definitions (enumerated code tables, explicit Sylvester matrices) or from transformers'
// own inv_freq recorded in the fixture, never from the functions under test.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "compute/numerics.h"
#include "core/error.h"

using namespace ds4::compute;

namespace {

// All finite non-negative E4M3 (fn) values in code order, decoded from the bit fields:
// e = 1..15 -> (1 + m/8) 2^(e-7), e = 0 -> m 2^-9; code 0x7F (e=15, m=7) is NaN.
std::vector<double> e4m3_codes() {
  std::vector<double> v;
  for (int code = 0; code < 0x7F; ++code) {
    int e = code >> 3, m = code & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return v;
}

std::vector<double> e2m1_codes() { return {0, .5, 1, 1.5, 2, 3, 4, 6}; }

// Brute-force nearest code; ties go to the even code index.
double nearest(const std::vector<double>& codes, double x) {
  double ax = std::fabs(x);
  size_t best = 0;
  for (size_t i = 1; i < codes.size(); ++i) {
    double db = std::fabs(codes[best] - ax), di = std::fabs(codes[i] - ax);
    if (di < db || (di == db && i % 2 == 0)) best = i;
  }
  return std::copysign(codes[best], x);
}

}  // namespace

TEST(E4M3, EveryCodeIsAFixedPoint) {
  auto codes = e4m3_codes();
  ASSERT_EQ(codes.size(), 127u);
  EXPECT_EQ(codes.back(), 448.0);
  for (double c : codes) {
    EXPECT_EQ(e4m3_round(static_cast<float>(c)), static_cast<float>(c)) << c;
    EXPECT_EQ(e4m3_round(static_cast<float>(-c)), static_cast<float>(-c)) << c;
  }
}

TEST(E4M3, MidpointsTieToEvenCode) {
  auto codes = e4m3_codes();
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    double mid = (codes[i] + codes[i + 1]) / 2;  // exact in float: one more mantissa bit
    double even = (i % 2 == 0) ? codes[i] : codes[i + 1];
    EXPECT_EQ(e4m3_round(static_cast<float>(mid)), static_cast<float>(even)) << "between codes " << i << "," << i + 1;
    EXPECT_EQ(e4m3_round(static_cast<float>(-mid)), static_cast<float>(-even));
    // Just off the midpoint goes to the nearer neighbour.
    float below = std::nextafter(static_cast<float>(mid), 0.0f);
    float above = std::nextafter(static_cast<float>(mid), 1000.0f);
    EXPECT_EQ(e4m3_round(below), static_cast<float>(codes[i]));
    EXPECT_EQ(e4m3_round(above), static_cast<float>(codes[i + 1]));
  }
}

TEST(E4M3, RandomValuesMatchBruteForceNearest) {
  auto codes = e4m3_codes();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-10.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(u(rng), static_cast<int>(rng() % 20) - 12);
    if (std::fabs(x) > 448) continue;
    ASSERT_EQ(e4m3_round(x), static_cast<float>(nearest(codes, x))) << x;
  }
  EXPECT_EQ(e4m3_round(1000.0f), 448.0f);  // saturates
}

TEST(E2M1, CodesMidpointsAndRandom) {
  auto codes = e2m1_codes();
  for (double c : codes) EXPECT_EQ(e2m1_round(static_cast<float>(c)), static_cast<float>(c));
  // Midpoints: .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4 (even code index).
  const float mids[] = {.25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float want[] = {0, 1, 1, 2, 2, 4, 4};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(e2m1_round(mids[i]), want[i]) << mids[i];
    EXPECT_EQ(e2m1_round(-mids[i]), -want[i]) << mids[i];
    EXPECT_EQ(want[i], static_cast<float>(nearest(codes, mids[i])));
  }
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  for (int i = 0; i < 5000; ++i) {
    float x = u(rng);
    ASSERT_EQ(e2m1_round(x), static_cast<float>(nearest(codes, x))) << x;
  }
}

TEST(Fp8RoundTrip, BlockScaleIsPowerOfTwoCeil) {
  // Block amax 1.0: s = 2^ceil(log2(1/448)) = 2^-8; every output is an E4M3 value times s.
  std::vector<float> x(64);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  x[5] = 1.0f;
  std::vector<float> y = x;
  fp8_e4m3_round_trip(y.data(), 64);
  const double s = std::ldexp(1.0, -8);
  auto codes = e4m3_codes();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(y[i], static_cast<float>(nearest(codes, x[i] / s) * s)) << i;
  // An all-zero block uses the 1e-4 floor and stays zero; blocks are independent.
  std::vector<float> z(128, 0.0f);
  z[64] = 3.0f;
  fp8_e4m3_round_trip(z.data(), 128);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(z[i], 0.0f);
  EXPECT_EQ(z[64], 3.0f);  // 3 = 1.5 * 2^1 is exact at any power-of-two scale in range
}

TEST(Fp4RoundTrip, BlockScaleAndGrid) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.37f;  // amax 5.92 -> s = 1
  std::vector<float> y = x;
  fp4_e2m1_round_trip(y.data(), 32);
  auto codes = e2m1_codes();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], static_cast<float>(nearest(codes, x[i]))) << i;
  // amax 12 -> s = 2^ceil(log2(2)) = 2.
  std::vector<float> w(32, 0.0f);
  w[0] = 12.0f;
  w[1] = 5.0f;  // 2.5 on the grid scale -> ties to 2 -> 4
  fp4_e2m1_round_trip(w.data(), 32);
  EXPECT_EQ(w[0], 12.0f);
  EXPECT_EQ(w[1], 4.0f);
}

TEST(Hadamard, MatchesSylvesterMatrixAndIsOrthogonal) {
  const int n = 128;
  for (int j = 0; j < n; j += 7) {
    std::vector<float> e(n, 0.0f);
    e[j] = 1.0f;
    hadamard_transform(e.data(), n);
    for (int i = 0; i < n; ++i) {
      double want = (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) / std::sqrt(128.0);
      ASSERT_NEAR(e[i], want, 1e-7) << i << "," << j;
    }
  }
  std::mt19937 rng(4);
  std::normal_distribution<float> g;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) a[i] = g(rng), b[i] = g(rng);
  double dot0 = 0, dot1 = 0;
  for (int i = 0; i < n; ++i) dot0 += static_cast<double>(a[i]) * b[i];
  hadamard_transform(a.data(), n);
  hadamard_transform(b.data(), n);
  for (int i = 0; i < n; ++i) dot1 += static_cast<double>(a[i]) * b[i];
  EXPECT_NEAR(dot0, dot1, 1e-4);
  EXPECT_THROW(hadamard_transform(a.data(), 96), ds4::Error);
}

TEST(Rope, YarnRangeForFlash) {
  RopeParams p{64, 160000, 16, 65536, 32, 1};
  YarnRange r = yarn_range(p);
  EXPECT_EQ(r.low, 15);
  EXPECT_EQ(r.high, 25);
  auto f = rope_frequencies(p);
  ASSERT_EQ(f.size(), 32u);
  for (int k = 0; k <= 15; ++k) EXPECT_DOUBLE_EQ(f[k], std::pow(160000.0, -2.0 * k / 64));
  for (int k = 25; k < 32; ++k) EXPECT_DOUBLE_EQ(f[k], std::pow(160000.0, -2.0 * k / 64) / 16);
  // k = 20: gamma = (20-15)/10 = 0.5, so the mean of both.
  double e20 = std::pow(160000.0, -40.0 / 64);
  EXPECT_NEAR(f[20], 0.5 * e20 + 0.5 * e20 / 16, 1e-18);
}

TEST(Rope, MatchesTransformersInvFreq) {
  // transformers 5.17's inv_freq for the fixture (Flash RoPE parameters), stored in meta.json.
  std::ifstream in(std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom/meta.json");
  ASSERT_TRUE(in) << "fixture meta.json missing";
  auto meta = nlohmann::json::parse(in);
  auto check = [&](const char* which, RopeParams p) {
    auto want = meta["rope"][which]["inv_freq"].get<std::vector<double>>();
    auto got = rope_frequencies(p);
    ASSERT_EQ(got.size(), want.size()) << which;
    // transformers computes in fp32: allow its rounding (relative 1e-6).
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6 * want[k]) << which << " k=" << k;
  };
  check("main", RopeParams{64, 10000, 1, 0, 32, 1});
  check("compress", RopeParams{64, 160000, 16, 65536, 32, 1});
}

TEST(HyperConnection, SinkhornSplit) {
  const int hc = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> mix(24), base(24);
  for (auto& v : mix) v = g(rng);
  for (auto& v : base) v = g(rng);
  const float scale[3] = {0.7f, 1.3f, 0.9f};
  float pre[4], post[4], comb[16];
  hc_split_mix(mix.data(), scale, base.data(), hc, 20, 1e-6f, pre, post, comb);
  for (int i = 0; i < hc; ++i) {
    EXPECT_NEAR(pre[i], 1 / (1 + std::exp(-(mix[i] * scale[0] + base[i]))) + 1e-6, 1e-6);
    EXPECT_NEAR(post[i], 2 / (1 + std::exp(-(mix[4 + i] * scale[1] + base[4 + i]))), 1e-6);
  }
  // Doubly stochastic: the last step normalizes columns (exact up to eps), rows converge.
  for (int j = 0; j < hc; ++j) {
    double cs = 0, rs = 0;
    for (int i = 0; i < hc; ++i) cs += comb[i * hc + j], rs += comb[j * hc + i];
    EXPECT_NEAR(cs, 1.0, 1e-5);
    EXPECT_NEAR(rs, 1.0, 1e-3);
  }
  for (float c : comb) EXPECT_GT(c, 0.0f);
}

TEST(HyperConnection, OneIterationIsSoftmaxThenColumnNorm) {
  // With iters = 1: M = softmax_j(logits) + eps, then a single column normalization.
  const int hc = 2;
  float mix[8] = {0, 0, 0, 0, 1.0f, 2.0f, 0.5f, -1.0f};
  float base[8] = {};
  const float scale[3] = {1, 1, 1};
  float pre[2], post[2], comb[4];
  hc_split_mix(mix, scale, base, hc, 1, 0.0f, pre, post, comb);
  double r0 = 1 / (1 + std::exp(1.0)), r1 = 1 / (1 + std::exp(-1.5));  // softmax rows (a) [1,2] (b) [.5,-1]
  double m00 = r0, m01 = 1 - r0, m10 = r1, m11 = 1 - r1;
  EXPECT_NEAR(comb[0], m00 / (m00 + m10), 1e-6);
  EXPECT_NEAR(comb[1], m01 / (m01 + m11), 1e-6);
  EXPECT_NEAR(comb[2], m10 / (m00 + m10), 1e-6);
  EXPECT_NEAR(comb[3], m11 / (m01 + m11), 1e-6);
}
