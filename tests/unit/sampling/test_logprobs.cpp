// compute_logprobs against a double-precision log-softmax, and select_best against a full sort.
#include "reference.h"

#include "core/error.h"
#include "sampling/logit_row.h"

#include <ds4/sampling.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Full sort by (logit desc, id asc) over finite entries: the oracle for every top-N ordering.
std::vector<int32_t> sorted_finite_ids(const std::vector<float>& l) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < l.size(); ++i)
    if (std::isfinite(l[i])) ids.push_back(static_cast<int32_t>(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
  return ids;
}

// Tolerance: each exp term is a float expf of a float difference (relative error <= ~2e-7 for
// |l - max| <= 40, from rounding the difference and expf's ulp); the double sum and log keep that
// as an absolute error of ~2e-7 in log Z; the result is then rounded to float, half an ulp of
// |logprob| (<= 64 here) is 4e-6. 1e-5 absolute plus 1e-6 relative covers both with margin.
double tolerance(double ref) { return 1e-5 + 1e-6 * std::fabs(ref); }

std::vector<float> vocab_with_specials() {
  std::vector<float> l = ds4::test::make_logits(129280, 555, 25.0);
  for (size_t i = 0; i < l.size(); i += 9973) l[i] = -kInf;
  for (size_t i = 5; i < l.size(); i += 15013) l[i] = kNaN;
  // Duplicates at the top exercise the id tie-break.
  const float top = l[static_cast<size_t>(sorted_finite_ids(l)[0])];
  l[90001] = top;
  l[12] = top;
  l[64000] = l[static_cast<size_t>(sorted_finite_ids(l)[6])];
  return l;
}

TEST(Logprobs, MatchDoublePrecisionLogSoftmaxOnFullVocabulary) {
  const std::vector<float> l = vocab_with_specials();
  const std::vector<double> ref = ds4::test::reference_log_softmax(l);
  const std::vector<int32_t> order = sorted_finite_ids(l);

  const int32_t chosen = order[3];
  const ds4::Logprobs got = ds4::compute_logprobs(l, chosen, 20);
  EXPECT_EQ(got.chosen.id, chosen);
  EXPECT_NEAR(got.chosen.logprob, ref[static_cast<size_t>(chosen)], tolerance(ref[static_cast<size_t>(chosen)]));
  ASSERT_EQ(got.top.size(), 20u);
  for (size_t r = 0; r < got.top.size(); ++r) {
    EXPECT_EQ(got.top[r].id, order[r]) << "rank " << r;
    EXPECT_NEAR(got.top[r].logprob, ref[static_cast<size_t>(order[r])], tolerance(ref[static_cast<size_t>(order[r])]));
  }
  EXPECT_EQ(got.top[0].id, 12);  // tie at the top: lowest id first

  // Every token's logprob, through the `chosen` slot, including tail tokens.
  for (size_t i = 0; i < l.size(); i += 997) {
    const auto one = ds4::compute_logprobs(l, static_cast<int32_t>(i), 0);
    if (std::isfinite(ref[i]))
      EXPECT_NEAR(one.chosen.logprob, ref[i], tolerance(ref[i])) << i;
    else
      EXPECT_EQ(one.chosen.logprob, -kInf) << i;
    EXPECT_TRUE(one.top.empty());
  }
}

TEST(Logprobs, AreOfTheModelDistributionNotTemperatureScaled) {
  // log-softmax of {0, ln 3} is {ln 1/4, ln 3/4} regardless of any sampler temperature.
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
  const auto got = ds4::compute_logprobs(l, 0, 2);
  EXPECT_NEAR(got.chosen.logprob, std::log(0.25), 1e-6);
  ASSERT_EQ(got.top.size(), 2u);
  EXPECT_EQ(got.top[0].id, 1);
  EXPECT_NEAR(got.top[0].logprob, std::log(0.75), 1e-6);
}

TEST(Logprobs, TopListsOnlyTokensWithProbability) {
  const std::vector<float> l = {-kInf, 2.0f, kNaN, 1.0f, -kInf};
  const auto got = ds4::compute_logprobs(l, 0, 10);
  EXPECT_EQ(got.chosen.logprob, -kInf);
  ASSERT_EQ(got.top.size(), 2u);
  EXPECT_EQ(got.top[0].id, 1);
  EXPECT_EQ(got.top[1].id, 3);
  const auto single = ds4::compute_logprobs(std::vector<float>{-7.0f}, 0, 5);
  ASSERT_EQ(single.top.size(), 1u);
  EXPECT_EQ(single.chosen.logprob, 0.0f);
}

TEST(Logprobs, RejectBadInput) {
  const std::vector<float> l = {1.0f, 2.0f};
  EXPECT_THROW(ds4::compute_logprobs(l, 2, 1), ds4::Error);
  EXPECT_THROW(ds4::compute_logprobs(l, -1, 1), ds4::Error);
  EXPECT_THROW(ds4::compute_logprobs(l, 0, -1), ds4::Error);
  EXPECT_THROW(ds4::compute_logprobs(std::vector<float>{}, 0, 1), ds4::Error);
  EXPECT_THROW(ds4::compute_logprobs(std::vector<float>{1.0f, kInf}, 0, 1), ds4::Error);
  EXPECT_THROW(ds4::compute_logprobs(std::vector<float>{kNaN, -kInf}, 0, 1), ds4::Error);
}

// Both selection strategies (heap for small n, nth_element for large n) against a full sort.
TEST(SelectBest, MatchesFullSortIncludingTies) {
  std::vector<float> l = ds4::test::make_logits(3000, 77, 4.0);
  for (size_t i = 0; i < l.size(); i += 7) l[i] = std::round(l[i]);  // many exact ties
  l[10] = kNaN;
  l[11] = -kInf;
  const std::vector<int32_t> order = sorted_finite_ids(l);
  const auto stats = ds4::sampling::scan_row(l, "test");
  ASSERT_EQ(stats.n_finite, static_cast<int64_t>(order.size()));
  for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{300}, int64_t{2000},
                          static_cast<int64_t>(order.size()), int64_t{100000}}) {
    std::vector<ds4::sampling::Candidate> got;
    ds4::sampling::select_best(l, stats.n_finite, n, got);
    std::sort(got.begin(), got.end(), ds4::sampling::better);
    const size_t want = std::min(order.size(), static_cast<size_t>(n));
    ASSERT_EQ(got.size(), want) << n;
    for (size_t r = 0; r < want; ++r) ASSERT_EQ(got[r].id, order[r]) << "n=" << n << " rank " << r;
  }
}

// Full-size row: n up to the number of 256-entry blocks (505) takes the block-maximum floor
// path, larger n the heap, n >= n_finite / 8 the nth_element path. Coarse rounding makes ties.
TEST(SelectBest, FullVocabularyAllStrategies) {
  std::vector<float> l = ds4::test::make_logits(129280, 91, 12.0, 200.0);
  for (float& x : l) x = std::round(x * 8.0f) / 8.0f;
  for (size_t i = 0; i < l.size(); i += 1001) l[i] = kNaN;
  for (size_t i = 7; i < l.size(); i += 2003) l[i] = -kInf;
  const std::vector<int32_t> order = sorted_finite_ids(l);
  const auto stats = ds4::sampling::scan_row(l, "test");
  for (const int64_t n : {int64_t{1}, int64_t{20}, int64_t{40}, int64_t{505}, int64_t{506}, int64_t{3000},
                          int64_t{20000}}) {
    std::vector<ds4::sampling::Candidate> got;
    ds4::sampling::select_best(l, stats.n_finite, n, got);
    std::sort(got.begin(), got.end(), ds4::sampling::better);
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    for (size_t r = 0; r < got.size(); ++r) ASSERT_EQ(got[r].id, order[r]) << "n=" << n << " rank " << r;
  }
}

}  // namespace
