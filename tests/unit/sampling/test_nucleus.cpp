// keep_nucleus (radix selection) against the obvious full sort + prefix scan.
#include "reference.h"
#include "sampling/nucleus.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace {

using ds4::sampling::Candidate;

std::set<int32_t> brute_force(std::vector<Candidate> c, double target) {
  std::sort(c.begin(), c.end(), ds4::sampling::better);
  std::set<int32_t> out;
  double mass = 0.0;
  for (const Candidate& x : c) {
    out.insert(x.id);
    mass += x.weight;
    if (mass >= target) break;
  }
  return out;
}

// Candidates whose weights are exp(logit - max) like the sampler's; `flat` makes many ties.
std::vector<Candidate> make(size_t n, uint64_t seed, double spread, double peak, bool ties) {
  const std::vector<float> l = ds4::test::make_logits(n, seed, spread, peak);
  const float mx = *std::max_element(l.begin(), l.end());
  std::vector<Candidate> c;
  for (size_t i = 0; i < n; ++i) {
    const float logit = ties ? std::round(l[i] * 2.0f) / 2.0f : l[i];
    c.push_back({static_cast<int32_t>(i), logit, std::exp(logit - std::round(mx * 2.0f) / 2.0f)});
  }
  // Weights are <= 1 in the sampler; clamp the rounding case above.
  for (Candidate& x : c) x.weight = std::min(x.weight, 1.0f);
  return c;
}

TEST(KeepNucleus, MatchesFullSortPrefix) {
  int cases = 0;
  for (const bool ties : {false, true}) {
    for (const size_t n : {size_t{10}, size_t{300}, size_t{5000}, size_t{129280}}) {
      for (const double peak : {1.0, 30.0, 1500.0}) {
        auto c = make(n, n * 7 + static_cast<uint64_t>(peak), 12.0, peak, ties);
        double z = 0.0;
        for (const auto& x : c) z += x.weight;
        for (const double p : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0, 1.5}) {
          const double target = p * z;
          const auto want = brute_force(c, target);
          auto got = c;
          ds4::sampling::keep_nucleus(got, target);
          std::set<int32_t> got_ids;
          for (const auto& x : got) got_ids.insert(x.id);
          // At a boundary the two summation orders may differ in the last bit of the mass;
          // the test data keeps every prefix mass well away from the target.
          EXPECT_EQ(got_ids.size(), got.size()) << "duplicates";
          EXPECT_EQ(got_ids, want) << "n=" << n << " peak=" << peak << " p=" << p << " ties=" << ties;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 4 * 3 * 7);
}

}  // namespace
