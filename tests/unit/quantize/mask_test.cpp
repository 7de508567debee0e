// Expert profiles and prune masks: round trips, selection by weight mass, the hash-layer rule,
// random masks with the same counts, and masks for another model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "quantize/expert_profile.h"

using namespace ds4;
using namespace ds4::quantize;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_mask_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

ModelKey key() {
  ModelKey k{"deepseek4", "ds4-demo", 3, 8, 2, {true, false, false}};
  return k;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Mask, ProfileRoundTripAndSelection) {
  ExpertProfile p;
  p.reset(key());
  p.tokens = 100;
  for (int e = 0; e < 8; ++e) {
    p.count[1][e] = 10 + e;
    p.weight[1][e] = e == 5 ? 100.0 : e;      // layer 1: 5 heaviest, then 7, 6, ...
    p.count[2][e] = 8 - e;
    p.weight[2][e] = 1.0;                    // layer 2: equal mass, count decides: 0, 1, 2, ...
  }
  const std::string pp = tmp("p.json");
  write_profile(pp, p);
  const ExpertProfile q = read_profile(pp);
  EXPECT_EQ(q.count, p.count);
  EXPECT_EQ(q.weight, p.weight);
  EXPECT_EQ(q.tokens, 100u);

  const PruneMask m = make_mask(q, 0.5, 0);
  EXPECT_EQ(m.pruned[0], std::vector<uint8_t>(8, 0));  // hash layer: never pruned
  EXPECT_EQ(m.pruned[1], (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(m.pruned[2], (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(m.pruned_count(), 8);
  // min-share: layer 1's expert 5 holds 100/128 of the mass; at least k = 2 are kept.
  const PruneMask s = make_mask(q, 1.0, 0.2);
  EXPECT_EQ(std::count(s.pruned[1].begin(), s.pruned[1].end(), 0), 2);
  EXPECT_EQ(s.pruned[1][5], 0);
  EXPECT_EQ(s.pruned[1][7], 0);

  const std::string mp = tmp("m.json");
  write_mask(mp, m);
  const PruneMask r = read_mask(mp);
  EXPECT_EQ(r.pruned, m.pruned);
  EXPECT_NO_THROW(check_mask(r, key(), mp));

  const PruneMask rnd = random_mask(key(), 0.75, 3);
  for (size_t l = 1; l < 3; ++l) EXPECT_EQ(std::count(rnd.pruned[l].begin(), rnd.pruned[l].end(), 1), 2);
  EXPECT_EQ(rnd.pruned[0], std::vector<uint8_t>(8, 0));
  EXPECT_EQ(random_mask(key(), 0.75, 3).pruned, rnd.pruned);  // seeded
}

TEST(Mask, BadMasks) {
  PruneMask m;
  m.model = key();
  m.pruned.assign(3, std::vector<uint8_t>(8, 0));
  ModelKey other = key();
  other.n_expert = 16;
  EXPECT_NE(error_of([&] { check_mask(m, other, "m.json"); }).find("mask for another model"), std::string::npos);
  other = key();
  other.name = "flash";
  EXPECT_NE(error_of([&] { check_mask(m, other, "m.json"); }).find("mask for another model"), std::string::npos);
  m.pruned[0][3] = 1;
  EXPECT_NE(error_of([&] { check_mask(m, key(), "m.json"); }).find("layer 0 is hash-routed"), std::string::npos);
  m.pruned[0][3] = 0;
  for (int e = 0; e < 7; ++e) m.pruned[2][e] = 1;
  EXPECT_NE(error_of([&] { check_mask(m, key(), "m.json"); }).find("keeps 1 experts, fewer than the 2"), std::string::npos);

  const std::string bad = tmp("bad.json");
  std::ofstream(bad) << R"({"format":"ds4-prune-mask","model":{"architecture":"deepseek4","name":"x","n_layer":1,)"
                     << R"("n_expert":4,"n_expert_used":2,"hash_layers":[]},"pruned":[[9]]})";
  EXPECT_NE(error_of([&] { read_mask(bad); }).find("expert 9 out of range"), std::string::npos);
  std::ofstream(bad) << "{\"format\":\"ds4-expert-profile\"}";
  EXPECT_NE(error_of([&] { read_mask(bad); }).find("not a ds4-prune-mask file"), std::string::npos);
  std::ofstream(bad) << "{not json";
  EXPECT_NE(error_of([&] { read_mask(bad); }).find("not valid JSON"), std::string::npos);
}
