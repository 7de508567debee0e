// The benchmark routing source (stream/synthetic_routing.h): a pure function of (seed,
// position, layer), distinct ids, the locality and popularity it promises, the flag's syntax,
// and that synthetic traces (the replay's calibration) route their learned layers with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "stream/replay.h"
#include "stream/synthetic_routing.h"

using namespace ds4;
using namespace ds4::stream;

namespace {

ZipfRoutingParams flash(uint64_t seed = 1) {
  ZipfRoutingParams p;
  p.seed = seed;
  return p;
}

}  // namespace

TEST(SyntheticRouting, PureFunctionOfSeedPositionLayer) {
  const ZipfRouter a(flash(5)), b(flash(5)), c(flash(6));
  // b is asked in another order (positions descending, layers interleaved): no hidden state.
  std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> seen;
  for (int64_t pos = 0; pos < 64; ++pos)
    for (int64_t il = 0; il < 43; ++il) seen[{pos, il}] = a.route(pos, il);
  int differ = 0;
  for (int64_t pos = 63; pos >= 0; --pos)
    for (int64_t il = 42; il >= 0; il -= 2) {
      EXPECT_EQ(b.route(pos, il), (seen[{pos, il}])) << pos << " " << il;
      differ += c.route(pos, il) != seen[{pos, il}];
    }
  EXPECT_GT(differ, 500);  // another seed is another routing (of 64 x 22 = 1408 sets)
  EXPECT_EQ(a.guess(17, 9, 6), b.guess(17, 9, 6));
}

TEST(SyntheticRouting, DistinctIdsInRange) {
  ZipfRoutingParams p = flash();
  p.zipf = 3.0;  // so skewed that slots collide constantly: the redraw must keep ids distinct
  p.n_expert = 16, p.k = 8;
  const ZipfRouter r(p);
  for (int64_t pos = 0; pos < 300; ++pos)
    for (int64_t il = 0; il < p.n_layer; ++il) {
      const auto v = r.route(pos, il);
      ASSERT_EQ(v.size(), 8u);
      EXPECT_EQ(std::set<int32_t>(v.begin(), v.end()).size(), 8u) << pos << " " << il;
      for (int32_t e : v) EXPECT_TRUE(e >= 0 && e < 16) << e;
    }
}

TEST(SyntheticRouting, LocalityIsTheReuseProbability) {
  // Uniform popularity, so a fresh draw hits the previous token's k experts by chance only
  // (k / E): the share of a token's experts that the previous token also used is then
  // reuse + (1 - reuse) * k / E.
  for (double reuse : {0.0, 0.45, 0.8}) {
    ZipfRoutingParams p = flash(3);
    p.zipf = 0, p.reuse = reuse;
    const ZipfRouter r(p);
    double kept = 0, total = 0;
    for (int64_t il = 0; il < p.n_layer; ++il) {
      std::vector<int32_t> prev = r.route(0, il);
      for (int64_t pos = 1; pos < 400; ++pos) {
        const auto cur = r.route(pos, il);
        for (int32_t e : cur) kept += std::find(prev.begin(), prev.end(), e) != prev.end();
        total += static_cast<double>(cur.size());
        prev = cur;
      }
    }
    EXPECT_NEAR(kept / total, reuse + (1 - reuse) * 6.0 / 256.0, 0.01) << reuse;
  }
}

TEST(SyntheticRouting, PopularityIsZipf) {
  // One expert per token and no locality: the hottest expert of a layer is drawn with
  // probability 1 / H, H = sum over ranks of 1 / r^zipf.
  ZipfRoutingParams p = flash(4);
  p.k = 1, p.reuse = 0, p.n_layer = 4;
  const ZipfRouter r(p);
  double H = 0;
  for (int i = 1; i <= 256; ++i) H += 1.0 / std::pow(i, p.zipf);
  for (int64_t il = 0; il < p.n_layer; ++il) {
    std::map<int32_t, int> count;
    const int n = 40000;
    for (int64_t pos = 0; pos < n; ++pos) ++count[r.route(pos, il)[0]];
    int top = 0;
    for (const auto& [e, c] : count) top = std::max(top, c);
    EXPECT_NEAR(static_cast<double>(top) / n, 1.0 / H, 0.006) << il;
  }
  // The rank order is per layer: the layers' hottest experts are not all the same one.
  std::set<int32_t> hottest;
  for (int64_t il = 0; il < p.n_layer; ++il) hottest.insert(r.popular(il, 0));
  EXPECT_GT(hottest.size(), 1u);
}

TEST(SyntheticRouting, GuessRecall) {
  ZipfRoutingParams p = flash(2);
  p.guess_recall = 0.5;
  const ZipfRouter r(p);
  double hit = 0, n = 0;
  for (int64_t pos = 0; pos < 300; ++pos)
    for (int64_t il = 3; il < 43; ++il) {
      const auto truth = r.route(pos, il);
      const auto g = r.guess(pos, il, 6);
      ASSERT_EQ(g.size(), 6u);
      EXPECT_EQ(std::set<int32_t>(g.begin(), g.end()).size(), 6u);
      for (int32_t e : g) hit += std::find(truth.begin(), truth.end(), e) != truth.end();
      n += 6;
    }
  EXPECT_NEAR(hit / n, 0.5, 0.02);
}

TEST(SyntheticRouting, FlagSyntax) {
  EXPECT_FALSE(parse_bench_routing("").has_value());
  EXPECT_EQ(parse_bench_routing("zipf"), 1u);
  EXPECT_EQ(parse_bench_routing("zipf:42"), 42u);
  for (const char* bad : {"zipf:", "zipf:x", "uniform", "zipf:-1", "zipf:1:2", "ZIPF"})
    EXPECT_THROW(parse_bench_routing(bad), Error) << bad;
}

TEST(SyntheticRouting, TracesRouteLearnedLayersWithTheEngineSource) {
  // One routing model for replay figures and live runs: a synthetic trace's learned layers and
  // guesses are the router's, so the replay's calibration is the live source's.
  SyntheticRouting s;
  s.n_tokens = 40;
  s.seed = 9;
  const Trace t = synthetic_trace(s);
  const ZipfRouter r(s.router());
  int learned = 0, hints = 0;
  for (const auto& rec : t.records) {
    if (rec.layer < s.n_hash_layers) continue;
    if (rec.hint) {
      EXPECT_EQ(rec.experts, r.guess(rec.pos, rec.layer, s.guesses));
      ++hints;
    } else {
      EXPECT_EQ(rec.experts, r.route(rec.pos, rec.layer));
      ++learned;
    }
  }
  EXPECT_EQ(learned, 40 * 40);
  EXPECT_EQ(hints, 40 * 40);
}
