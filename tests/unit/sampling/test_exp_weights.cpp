// The sampler's own exp (sampling/exp_weights.h) against std::exp in double.
#include "sampling/exp_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace {

TEST(ExpNonpositive, RelativeErrorBelow3e7OnWholeRange) {
  // Every float in (-87, 0] would be 1e9 values; a dense sweep, runs of consecutive floats at
  // tiny magnitudes and around each range-reduction switch point cover the failure modes.
  double worst = 0.0;
  float worst_x = 0.0f;
  auto check = [&](float x) {
    const double ref = std::exp(static_cast<double>(x));
    const double rel = std::fabs(static_cast<double>(ds4::sampling::exp_nonpositive(x)) - ref) / ref;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  };
  for (int i = 0; i < 2000000; ++i) check(-87.0f * static_cast<float>(i) / 2000000.0f);
  for (int k = -60; k <= 6; ++k) {  // tiny magnitudes, where the result rounds near 1
    float x = -std::ldexp(1.0f, k);
    for (int j = 0; j < 1000; ++j, x = std::nextafter(x, 0.0f)) check(x);
  }
  // Consecutive floats around the range-reduction switch points x = (n + 1/2) ln2.
  for (int n = 0; n < 125; ++n) {
    float x = -static_cast<float>((n + 0.5) * 0.6931471805599453) - 1e-4f * static_cast<float>(n + 1);
    for (int j = 0; j < 20000; ++j, x = std::nextafter(x, 0.0f)) check(x);
  }
  EXPECT_LT(worst, 3e-7) << "at x = " << worst_x;
  std::cout << "worst relative error " << worst << " at x = " << worst_x << "\n";
}

TEST(ExpNonpositive, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ds4::sampling::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(ds4::sampling::exp_nonpositive(-0.0f), 1.0f);
  EXPECT_EQ(ds4::sampling::exp_nonpositive(-inf), 0.0f);
  EXPECT_EQ(ds4::sampling::exp_nonpositive(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  EXPECT_EQ(ds4::sampling::exp_nonpositive(-87.5f), 0.0f);
  EXPECT_EQ(ds4::sampling::exp_nonpositive(-1e30f), 0.0f);
  EXPECT_GT(ds4::sampling::exp_nonpositive(-86.9f), 0.0f);
  EXPECT_LE(ds4::sampling::exp_nonpositive(-1e-7f), 1.0f);
}

// The vectorized row loop must give bit-identical weights to the scalar function: the sampler
// mixes both (whole-row weights and per-candidate weights) in one distribution.
TEST(ExpWeights, RowLoopMatchesScalarBitForBit) {
  std::vector<float> row(10007);
  for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(static_cast<float>(i) * 0.37f) * 40.0f;
  row[3] = -std::numeric_limits<float>::infinity();
  row[4] = std::numeric_limits<float>::quiet_NaN();
  row[5] = 40.0f;  // the top logit itself
  for (const float t : {1.0f, 0.3f, 7.5f, 1e-30f, 1e-45f /* subnormal: 1/T = inf */}) {
    const float inv_t = 1.0f / t;
    std::vector<float> out(row.size());
    ds4::sampling::exp_weights(row.data(), row.size(), 40.0f, inv_t, out.data());
    EXPECT_EQ(out[5], 1.0f) << "T=" << t;
    for (size_t i = 0; i < row.size(); ++i) {
      const float scalar = ds4::sampling::softmax_weight(row[i], 40.0f, inv_t);
      ASSERT_EQ(std::memcmp(&out[i], &scalar, sizeof(float)), 0) << "i=" << i << " T=" << t;
    }
  }
}

}  // namespace
