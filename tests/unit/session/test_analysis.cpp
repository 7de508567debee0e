// Engine-level model analysis on the demo model (real weights): collection does not change a
// single logit; the imatrix and profile counts add up to the tokens evaluated; a prune mask from
// the profile keeps its experts out of routing (seen in a profile collected under the mask);
// masks for another model and analysis with streamed experts are refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "quantize/expert_profile.h"
#include "quantize/imatrix.h"

using namespace ds4;
namespace fs = std::filesystem;

namespace {

const std::string kDemo = std::string(DS4_SOURCE_DIR) + "/models/ds4-demo.gguf";

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_analysis_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

std::shared_ptr<const Engine> open(bool imatrix, bool profile, const std::string& mask = "") {
  EngineOptions o;
  o.model_path = kDemo;
  o.threads = 2;
  o.ctx_size = 128;
  o.collect_imatrix = imatrix;
  o.collect_expert_profile = profile;
  o.prune_mask = mask;
  return Engine::open(o);
}

std::vector<float> logits_of(const std::shared_ptr<const Engine>& e, const std::vector<int32_t>& ids) {
  auto s = e->new_session();
  s->sync(ids);
  return {s->logits().begin(), s->logits().end()};
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

TEST(Analysis, CollectsWithoutChangingLogits) {
  auto plain = open(false, false);
  auto an = open(true, true);
  const auto ids = plain->tokenizer().encode("In the beginning God created the heaven and the earth. And the earth", false);
  const auto a = logits_of(plain, ids), b = logits_of(an, ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  const int64_t n = static_cast<int64_t>(ids.size());
  EXPECT_EQ(an->analysis_tokens(), static_cast<uint64_t>(n));

  const std::string ip = tmp("a.imatrix.gguf"), pp = tmp("a.profile.json");
  an->write_imatrix(ip, {"test"}, 1, 128);
  an->write_expert_profile(pp);
  const auto m = quantize::read_imatrix(ip);
  EXPECT_EQ(m.entries.at("output.weight").counts[0], 1);  // a session computes the last position's logits only
  EXPECT_EQ(m.entries.at("blk.0.attn_q_a.weight").counts[0], n);
  EXPECT_EQ(m.entries.at("blk.0.attn_output_a.weight").counts[0], 2 * n);  // 2 output groups per token
  for (int l = 0; l < 6; ++l)
    for (const char* t : {"gate", "up", "down"}) {
      const auto& c = m.entries.at(fmt::format("blk.{}.ffn_{}_exps.weight", l, t)).counts;
      ASSERT_EQ(c.size(), 8u);
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0.0), 2.0 * n) << l << t;  // k = 2 per token
    }
  const auto p = quantize::read_profile(pp);
  EXPECT_EQ(p.tokens, static_cast<uint64_t>(n));
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(std::accumulate(p.count[l].begin(), p.count[l].end(), uint64_t{0}), static_cast<uint64_t>(2 * n));
    // Profile and imatrix agree on how often each expert ran.
    for (int e = 0; e < 8; ++e)
      EXPECT_EQ(static_cast<double>(p.count[l][e]), m.entries.at(fmt::format("blk.{}.ffn_up_exps.weight", l)).counts[e]);
  }
  EXPECT_TRUE(p.model.hash_layer[0]);
  EXPECT_FALSE(p.model.hash_layer[3]);
  EXPECT_NE(error_of([&] { plain->write_imatrix(ip, {}, 0, 0); }).find("collection is off"), std::string::npos);
}

TEST(Analysis, PruneMaskKeepsExpertsOutOfRouting) {
  auto an = open(false, true);
  const auto ids = an->tokenizer().encode(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good.", false);
  logits_of(an, ids);
  const std::string pp = tmp("b.profile.json"), mp = tmp("b.mask.json");
  an->write_expert_profile(pp);
  const auto mask = quantize::make_mask(quantize::read_profile(pp), 0.5, 0);
  EXPECT_EQ(mask.pruned_count(), 3 * 4);  // 3 learned-routing layers x 4 of 8 experts
  quantize::write_mask(mp, mask);

  auto pruned = open(false, true, mp);
  EXPECT_NE(pruned->prune_description().find("12 experts removed"), std::string::npos);
  const auto a = logits_of(open(false, false), ids), b = logits_of(pruned, ids);
  EXPECT_NE(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  const std::string pp2 = tmp("c.profile.json");
  pruned->write_expert_profile(pp2);
  const auto p2 = quantize::read_profile(pp2);
  int64_t zero = 0;
  for (int l = 0; l < 6; ++l)
    for (int e = 0; e < 8; ++e)
      if (mask.pruned[l][e]) {
        EXPECT_EQ(p2.count[l][e], 0u) << l << " " << e;
        ++zero;
      }
  EXPECT_EQ(zero, 12);
  // Masks for another model, or that prune a hash-routed layer, are refused at open.
  auto other = mask;
  other.model.name = "not-the-demo";
  quantize::write_mask(mp, other);
  EXPECT_NE(error_of([&] { open(false, false, mp); }).find("mask for another model"), std::string::npos);
  auto hash = mask;
  hash.pruned[0][1] = 1;
  quantize::write_mask(mp, hash);
  EXPECT_NE(error_of([&] { open(false, false, mp); }).find("layer 0 is hash-routed"), std::string::npos);
}

TEST(Analysis, RefusedWithStreamedExperts) {
  EngineOptions o;
  o.model_path = kDemo;
  o.ssd_streaming = true;
  o.collect_imatrix = true;
  EXPECT_NE(error_of([&] { Engine::open(o); }).find("need resident experts"), std::string::npos);
}
