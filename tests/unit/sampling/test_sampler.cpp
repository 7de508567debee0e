// Deterministic behaviour of ds4::Sampler: greedy, seeding, edge-case configurations, bad input.
#include "reference.h"

#include "core/error.h"

#include <ds4/sampling.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
using ds4::test::make_logits;

std::vector<int32_t> draw(ds4::Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits));
  return out;
}

// SplitMix64 test vector for seed 0, as published with Vigna's reference splitmix64.c.
TEST(Rng, SplitMix64ReferenceVector) {
  ds4::Rng rng(0);
  EXPECT_EQ(rng.next_u64(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.next_u64(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng.next_u64(), 0x06c45d188009454full);
  EXPECT_EQ(rng.next_u64(), 0xf88bb8a8724c81ecull);
}

TEST(Rng, UnitIsTop53BitsAndStateRestores) {
  ds4::Rng a(42);
  for (int i = 0; i < 10; ++i) a.next_u64();
  const ds4::RngState saved = a.state();
  EXPECT_EQ(saved.seed, 42u);
  EXPECT_EQ(saved.draws, 10u);
  const uint64_t x = a.next_u64();
  ds4::Rng b(saved);
  EXPECT_DOUBLE_EQ(b.next_unit(), static_cast<double>(x >> 11) / 9007199254740992.0);
}

// The documented draw rule, recomputed independently: u_n from SplitMix64 (written out again
// here), weights in double, walk the kept tokens in ascending id. Draws whose u * total lies
// within 1e-5 of an interval boundary are skipped, since float weights may round either way.
TEST(Sampler, DrawFollowsTheDocumentedRule) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.25f, 0.0f, 1.9f};
  struct Case {
    ds4::SamplerConfig config;
    std::vector<int32_t> kept;  // by the filter rules, worked out by hand
  };
  const float t = 0.8f;
  const std::vector<Case> cases = {
      {{t, 0, 1.0f, 0.0f, 31337}, {0, 1, 2, 3, 4, 5}},  // no filter: whole-row path
      {{t, 3, 1.0f, 0.0f, 31337}, {2, 3, 5}},           // top-3: 2.0, 1.9, 1.25
      {{t, 0, 1.0f, 0.5f, 31337}, {2, 5}},              // min-p 0.5: l >= 2 + 0.8 ln 0.5 = 1.445
      {{t, 0, 0.8f, 0.0f, 31337}, {2, 3, 5}},           // top-p 0.8: cumulative .395 .743 .898
      {{t, 2, 0.6f, 0.0f, 31337}, {2, 5}},              // top-2 renormalized {.531, .469}; p .6
      {{t, 2, 0.5f, 0.0f, 31337}, {2}},                 // ... p .5 is reached by the first
  };
  for (const Case& c : cases) {
    ds4::Sampler sampler(c.config);
    uint64_t state = c.config.seed;
    int checked = 0;
    for (int n = 0; n < 2000; ++n) {
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const double u = static_cast<double>(z >> 11) / 9007199254740992.0;
      double total = 0.0;
      for (int32_t id : c.kept) total += std::exp((logits[static_cast<size_t>(id)] - 2.0) / t);
      const double target = u * total;
      double mass = 0.0;
      int32_t expected = -1;
      bool near_boundary = false;
      for (int32_t id : c.kept) {
        mass += std::exp((logits[static_cast<size_t>(id)] - 2.0) / t);
        if (std::fabs(target - mass) < 1e-5) near_boundary = true;
        if (expected < 0 && target < mass) expected = id;
      }
      const int32_t got = sampler.sample(logits);
      if (near_boundary) continue;
      ASSERT_EQ(got, expected) << "draw " << n << " u=" << u << " top_k=" << c.config.top_k << " min_p=" << c.config.min_p;
      ++checked;
    }
    EXPECT_GT(checked, 1900);
  }
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  ds4::Sampler s({0.0f});
  EXPECT_EQ(s.sample(logits), 1);
  ds4::Sampler negative({-3.0f});
  EXPECT_EQ(negative.sample(logits), 1);
  EXPECT_EQ(ds4::argmax(logits), 1);
  // Greedy consumes no random numbers.
  EXPECT_EQ(s.rng().state().draws, 0u);
}

TEST(Sampler, GreedyOnFullVocabularyMatchesLinearScan) {
  std::vector<float> logits = make_logits(129280, 3);
  logits[77777] = 50.0f;
  logits[100000] = 50.0f;
  ds4::Sampler s({0.0f});
  EXPECT_EQ(s.sample(logits), 77777);
}

TEST(Sampler, NaNIsNeverChosen) {
  std::vector<float> logits = {kNaN, 1.0f, kNaN, 0.0f, kNaN};
  ds4::Sampler greedy({0.0f});
  EXPECT_EQ(greedy.sample(logits), 1);
  ds4::Sampler s({1.0f, 0, 1.0f, 0.0f, 5});
  for (int32_t t : draw(s, logits, 2000)) EXPECT_TRUE(t == 1 || t == 3) << t;
  ds4::Sampler k({1.0f, 2, 0.5f, 0.0f, 5});
  for (int32_t t : draw(k, logits, 200)) EXPECT_TRUE(t == 1 || t == 3) << t;
}

TEST(Sampler, NegativeInfinityIsNeverChosen) {
  std::vector<float> logits = {-kInf, -kInf, 3.0f, -kInf};
  ds4::Sampler s({1.0f, 0, 1.0f, 0.0f, 1});
  for (int32_t t : draw(s, logits, 100)) EXPECT_EQ(t, 2);
  ds4::Sampler k({1.0f, 3, 0.99f, 0.0f, 1});
  for (int32_t t : draw(k, logits, 100)) EXPECT_EQ(t, 2);
}

TEST(Sampler, RejectsRowsWithoutADistribution) {
  ds4::Sampler s;
  EXPECT_THROW(s.sample(std::vector<float>{}), ds4::Error);
  EXPECT_THROW(s.sample(std::vector<float>{-kInf, -kInf}), ds4::Error);
  EXPECT_THROW(s.sample(std::vector<float>{kNaN, -kInf}), ds4::Error);
  try {
    s.sample(std::vector<float>{0.0f, 1.0f, kInf});
    FAIL() << "expected ds4::Error";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 2"), std::string::npos) << e.what();
  }
  ds4::Sampler greedy({0.0f});
  EXPECT_THROW(greedy.sample(std::vector<float>{kNaN}), ds4::Error);
  EXPECT_THROW(ds4::argmax(std::vector<float>{-kInf}), ds4::Error);
}

TEST(Sampler, RejectsInvalidConfig) {
  EXPECT_THROW(ds4::Sampler({kNaN}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({kInf}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({1.0f, 0, 1.5f}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({1.0f, 0, -0.1f}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({1.0f, 0, kNaN}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({1.0f, 0, 1.0f, 1.01f}), ds4::Error);
  EXPECT_THROW(ds4::Sampler({1.0f, 0, 1.0f, kNaN}), ds4::Error);
  ds4::Sampler s;
  EXPECT_THROW(s.set_config({1.0f, 0, 2.0f}), ds4::Error);
  EXPECT_EQ(s.config().top_p, 1.0f);  // unchanged after the failed update
  ds4::SampleOptions bad;
  bad.temperature = kNaN;
  EXPECT_THROW(s.sample(std::vector<float>{1.0f, 2.0f}, bad), ds4::Error);
}

TEST(Sampler, DefaultsMatchDs4) {
  const ds4::SamplerConfig c;
  EXPECT_EQ(c.temperature, 1.0f);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.top_p, 1.0f);
  EXPECT_EQ(c.min_p, 0.05f);
}

TEST(Sampler, SameSeedReproducesDifferentSeedsDiffer) {
  const std::vector<float> logits = make_logits(2000, 17, 3.0);  // broad: hundreds of live tokens
  for (const ds4::SamplerConfig base : {ds4::SamplerConfig{1.0f, 0, 1.0f, 0.0f},
                                        ds4::SamplerConfig{0.8f, 100, 0.9f, 0.01f}}) {
    ds4::SamplerConfig c1 = base, c2 = base;
    c1.seed = 1234;
    c2.seed = 1235;
    ds4::Sampler a(c1), b(c1), other(c2);
    const auto seq_a = draw(a, logits, 500);
    EXPECT_EQ(seq_a, draw(b, logits, 500));
    EXPECT_NE(seq_a, draw(other, logits, 500));
  }
}

TEST(Sampler, RestoringRngStateReplaysTheContinuation) {
  const std::vector<float> logits = make_logits(500, 8, 3.0);
  ds4::Sampler a({1.0f, 0, 1.0f, 0.0f, 99});
  draw(a, logits, 37);
  const ds4::RngState mid = a.rng().state();
  EXPECT_EQ(mid.draws, 37u);  // exactly one draw per non-greedy sample
  const auto tail = draw(a, logits, 100);
  ds4::Sampler b({1.0f, 0, 1.0f, 0.0f, 0});
  b.rng().set_state(mid);
  EXPECT_EQ(draw(b, logits, 100), tail);
}

TEST(Sampler, VocabularyOfOne) {
  for (const float t : {0.0f, 1.0f, 1e-30f, 1e30f}) {
    for (const int k : {0, 1, 5}) {
      ds4::Sampler s({t, k, 0.0f, 1.0f, 3});
      EXPECT_EQ(s.sample(std::vector<float>{-4.0f}), 0);
      ds4::Sampler d({t, k, 1.0f, 0.0f, 3});
      EXPECT_EQ(d.sample(std::vector<float>{123.0f}), 0);
    }
  }
}

TEST(Sampler, TopKAtOrAboveVocabularyIsOff) {
  const std::vector<float> logits = make_logits(300, 21, 3.0);
  for (const float top_p : {1.0f, 0.9f}) {
    ds4::Sampler off({1.0f, 0, top_p, 0.0f, 77});
    ds4::Sampler exact({1.0f, 300, top_p, 0.0f, 77});
    ds4::Sampler above({1.0f, 100000, top_p, 0.0f, 77});
    const auto ref = draw(off, logits, 300);
    EXPECT_EQ(draw(exact, logits, 300), ref);
    EXPECT_EQ(draw(above, logits, 300), ref);
  }
}

TEST(Sampler, TinyTopPAndTopK1AreGreedy) {
  std::vector<float> logits = make_logits(5000, 4, 3.0);
  logits[4321] = logits[ds4::argmax(logits)];  // a tie at the top, higher id
  const int32_t best = ds4::argmax(logits);
  ASSERT_LT(best, 4321);
  ds4::Sampler tiny_p({1.0f, 0, 1e-9f, 0.0f, 5});
  ds4::Sampler zero_p({1.0f, 0, 0.0f, 0.0f, 5});
  ds4::Sampler k1({1.0f, 1, 1.0f, 0.0f, 5});
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(tiny_p.sample(logits), best);
    EXPECT_EQ(zero_p.sample(logits), best);
    EXPECT_EQ(k1.sample(logits), best);
  }
}

TEST(Sampler, TinyTemperatureKeepsOnlyTheTop) {
  const std::vector<float> logits = make_logits(5000, 6, 3.0);
  const int32_t best = ds4::argmax(logits);
  for (const float min_p : {0.0f, 0.05f}) {
    ds4::Sampler s({1e-30f, 0, 1.0f, min_p, 9});
    for (int32_t t : draw(s, logits, 200)) EXPECT_EQ(t, best);
    ds4::Sampler p({1e-30f, 0, 0.5f, min_p, 9});
    for (int32_t t : draw(p, logits, 200)) EXPECT_EQ(t, best);
  }
}

TEST(Sampler, PerCallTemperatureOverrideForcesGreedy) {
  const std::vector<float> logits = make_logits(1000, 12, 3.0);
  ds4::Sampler s({1.5f, 0, 1.0f, 0.0f, 4});
  ds4::SampleOptions greedy;
  greedy.temperature = 0.0f;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, greedy), ds4::argmax(logits));
  EXPECT_EQ(s.rng().state().draws, 0u);
  EXPECT_EQ(s.config().temperature, 1.5f);
}

TEST(Sampler, AdjustHookBansTokensOnAPrivateCopy) {
  std::vector<float> logits = {1.0f, 5.0f, 4.9f, 0.0f};
  const std::vector<float> original = logits;
  ds4::SampleOptions options;
  options.adjust_logits = [](std::span<float> l) {
    ASSERT_EQ(l.size(), 4u);
    l[1] = -std::numeric_limits<float>::infinity();
  };
  ds4::Sampler greedy({0.0f});
  EXPECT_EQ(greedy.sample(logits, options), 2);
  ds4::Sampler s({1.0f, 0, 1.0f, 0.0f, 2});
  for (int i = 0; i < 500; ++i) EXPECT_NE(s.sample(logits, options), 1);
  EXPECT_EQ(logits, original);

  ds4::SampleOptions poison;
  poison.adjust_logits = [](std::span<float> l) { l[0] = std::numeric_limits<float>::infinity(); };
  EXPECT_THROW(s.sample(logits, poison), ds4::Error);
}

}  // namespace
