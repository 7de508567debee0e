// Statistical tests: the empirical distribution of Sampler::sample over many draws must match the
// filtered distribution computed independently in double precision (reference.h).
#include "reference.h"

#include <ds4/sampling.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

namespace {

using ds4::test::goodness_of_fit;
using ds4::test::make_logits;
using ds4::test::reference_distribution;

struct Setting {
  const char* name;
  size_t vocab;
  float temperature;
  int top_k;
  float top_p;
  float min_p;
  int64_t draws;
};

void PrintTo(const Setting& s, std::ostream* os) { *os << s.name; }

class SamplerDistribution : public ::testing::TestWithParam<Setting> {};

TEST_P(SamplerDistribution, MatchesDoublePrecisionReference) {
  const Setting& s = GetParam();
  // Full-size rows get an LM-like peak (a few dozen tokens near the top, a long flat tail).
  const std::vector<float> logits =
      s.vocab > 10000 ? make_logits(s.vocab, 0xC0FFEE + s.vocab, 12.0, 1500.0) : make_logits(s.vocab, 0xC0FFEE + s.vocab);
  // The reference uses the float parameter values widened to double, exactly what the sampler sees.
  const auto ref = reference_distribution(logits, s.temperature, s.top_k, s.top_p, s.min_p);
  // Guard the oracle: if a token sat within float rounding of a min-p or top-p cut, the float
  // sampler and the double reference could legitimately disagree on the kept set.
  ASSERT_GT(ref.min_p_margin, 1e-4) << "test logits too close to the min-p cut";
  ASSERT_GT(ref.top_p_margin, 1e-5) << "test logits too close to the top-p cut";

  ds4::Sampler sampler({s.temperature, s.top_k, s.top_p, s.min_p, /*seed=*/0x5EED + s.vocab});
  std::vector<int64_t> counts(s.vocab, 0);
  for (int64_t i = 0; i < s.draws; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];

  const auto fit = goodness_of_fit(ref.p, counts, s.draws);
  EXPECT_EQ(fit.draws_outside_support, 0) << "first token drawn outside the kept set: " << fit.first_outside;
  EXPECT_LT(fit.chi_square, fit.critical) << "kept " << ref.kept;
  EXPECT_LT(fit.total_variation, fit.tv_bound) << "kept " << ref.kept;
  std::cout << fmt::format("[{}] kept={} chi2={:.1f} (crit {:.1f}) TV={:.5f} (bound {:.5f})\n", s.name,
                           ref.kept, fit.chi_square, fit.critical, fit.total_variation, fit.tv_bound);
}

INSTANTIATE_TEST_SUITE_P(
    Settings, SamplerDistribution,
    ::testing::Values(
        Setting{"full_T1", 1000, 1.0f, 0, 1.0f, 0.0f, 200000},
        Setting{"defaults", 1000, 1.0f, 0, 1.0f, 0.05f, 200000},
        Setting{"top_k40_T0_7", 1000, 0.7f, 40, 1.0f, 0.0f, 200000},
        Setting{"top_p0_9_T1_3", 1000, 1.3f, 0, 0.9f, 0.0f, 200000},
        Setting{"k50_p0_8_minp0_02_T0_8", 1000, 0.8f, 50, 0.8f, 0.02f, 200000},
        Setting{"p0_95_minp0_1_T2", 1000, 2.0f, 0, 0.95f, 0.1f, 200000},
        Setting{"k900_p0_97_T1", 1000, 1.0f, 900, 0.97f, 0.0f, 200000},
        Setting{"k3_T5", 1000, 5.0f, 3, 1.0f, 0.05f, 200000},
        Setting{"minp0_1_T0_5", 1000, 0.5f, 0, 1.0f, 0.1f, 200000},
        Setting{"minp0_2_T1_5", 1000, 1.5f, 0, 1.0f, 0.2f, 200000},
        Setting{"deepseek_vocab_defaults", 129280, 1.0f, 0, 1.0f, 0.05f, 200000},
        Setting{"deepseek_vocab_p0_9", 129280, 0.9f, 0, 0.9f, 0.0f, 20000}),
    [](const ::testing::TestParamInfo<Setting>& info) { return std::string(info.param.name); });

// Ties at the top with min_p = 1 keep exactly the tied tokens, uniformly.
TEST(SamplerDistributionEdge, MinP1KeepsTiedMaximaUniformly) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f, -1.0f};
  ds4::Sampler sampler({1.0f, 0, 1.0f, 1.0f, 7});
  const int64_t n = 60000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  const std::vector<double> p = {0, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 0};
  const auto fit = goodness_of_fit(p, counts, n);
  EXPECT_EQ(fit.draws_outside_support, 0);
  EXPECT_LT(fit.chi_square, fit.critical);
}

// A huge temperature flattens every kept token to weight ~1: uniform over the (all-kept) row.
TEST(SamplerDistributionEdge, HugeTemperatureIsUniform) {
  const std::vector<float> logits = make_logits(50, 99);
  ds4::Sampler sampler({1e30f, 0, 1.0f, 0.05f, 11});
  const int64_t n = 100000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  const std::vector<double> p(logits.size(), 1.0 / static_cast<double>(logits.size()));
  const auto fit = goodness_of_fit(p, counts, n);
  EXPECT_LT(fit.chi_square, fit.critical);
}

}  // namespace
