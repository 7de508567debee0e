// Engine/Session on a qwen35moe file (a random checkpoint converted by convert-hf, see
// tests/unit/model/qwen35moe_checkpoint.h): the engine picks the family from
// general.architecture; a growing conversation evaluates only its new suffix; rewinds restore
// the DeltaNet state from checkpoints and give logits byte-equal to a fresh evaluation;
// payloads round-trip exactly and bad ones are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/test_paths.h"
#include "convert/convert_hf.h"
#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "unit/model/qwen35moe_checkpoint.h"

namespace fs = std::filesystem;

namespace {

const std::string& model_path() {
  static const std::string path = [] {
    const fs::path d = ds4::test::test_tmp_dir() / ("ds4_qwen_session_" + std::to_string(::getpid()));
    fs::create_directories(d);
    ds4::test::QwenTiny c;
    c.layers = {"linear_attention", "full_attention", "linear_attention", "linear_attention"};
    ds4::test::write_qwen_checkpoint((d / "hf").string(), c, 21);
    ds4::convert::ConvertOptions o;
    o.hf_dir = (d / "hf").string();
    o.out_path = (d / "m.gguf").string();
    o.recipe = ds4::convert::Recipe::F32;
    ds4::convert::convert_hf(o);
    return o.out_path;
  }();
  return path;
}

std::shared_ptr<const ds4::Engine> engine() {
  static std::shared_ptr<const ds4::Engine> e = [] {
    ds4::EngineOptions o;
    o.model_path = model_path();
    o.threads = 2;
    o.ctx_size = 512;
    o.max_batch = 64;
    return ds4::Engine::open(o);
  }();
  return e;
}

std::vector<int32_t> seq(size_t n, uint32_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed + 0x9E3779B97F4A7C15ull;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<int32_t>(x % 256);
  }
  return t;
}

std::vector<float> fresh_logits(const std::vector<int32_t>& toks) {
  auto s = engine()->new_session();
  s->eval(toks);
  auto l = s->logits();
  return {l.begin(), l.end()};
}

}  // namespace

TEST(Qwen35MoeSession, EnginePicksTheFamily) {
  const auto& in = engine()->info();
  EXPECT_EQ(in.architecture, "qwen35moe");
  EXPECT_EQ(in.n_layer, 4);
  EXPECT_EQ(in.n_vocab, 256);
  EXPECT_GT(engine()->memory_plan().checkpoint_bytes, 0u);
  EXPECT_GT(engine()->memory_plan().state_bytes_per_token, 4u);
}

// The memory plan counts the DeltaNet state, figures worked out by hand from the checkpoint's
// config (QwenTiny: layers L A L L, hidden 32, DeltaNet 2 key / 4 value heads of 16, conv 4,
// attention 1 KV head of 32, vocabulary 256).
TEST(Qwen35MoeSession, MemoryPlanCountsTheDeltaNetState) {
  const auto& p = engine()->memory_plan();
  // Per DeltaNet layer: conv history (4 - 1) x (2*2*16 + 4*16 = 128 channels) = 384 floats and
  // the recurrent state 4 value heads x 16 x 16 = 1024 floats; 3 such layers; + 256 logits.
  const uint64_t fixed = (256 + 3 * (384 + 1024)) * 4;
  EXPECT_EQ(p.state_fixed_bytes, fixed);
  // Per token: the token id + K and V rows of the one attention layer (1 x 32 each).
  EXPECT_EQ(p.state_bytes_per_token, (1 + 2 * 32) * 4u);
  EXPECT_EQ(p.state_bytes_at_ctx, fixed + (1 + 2 * 32) * 4u * 512);
  // A checkpoint copies the DeltaNet state whole and the last logits (the KV cache is cut by
  // position, the token list is append-only).
  EXPECT_EQ(p.checkpoint_bytes, fixed);
}

TEST(Qwen35MoeSession, GrowingConversationEvaluatesOnlyTheSuffix) {
  auto s = engine()->new_session();
  std::vector<int32_t> conv = seq(40, 1);
  auto r = s->sync(conv);
  EXPECT_EQ(r.evaluated, 40);
  for (int turn = 0; turn < 3; ++turn) {
    const auto more = seq(17 + turn, 10 + turn);
    conv.insert(conv.end(), more.begin(), more.end());
    r = s->sync(conv);
    EXPECT_EQ(r.reused, static_cast<int64_t>(conv.size() - more.size()));
    EXPECT_EQ(r.evaluated, static_cast<int64_t>(more.size()));
    EXPECT_EQ(r.replayed, 0);
  }
  const auto want = fresh_logits(conv);
  const auto got = s->logits();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
}

TEST(Qwen35MoeSession, RewindIsExact) {
  ds4::SessionOptions so;
  so.checkpoint_interval = 32;
  auto s = engine()->new_session(so);
  const auto a = seq(150, 2);
  s->eval(a);
  for (int64_t to : {149, 100, 64, 33, 5}) {
    // Checkpoints every 32 positions (and at the end of each call): a rewind replays at most
    // the distance to the checkpoint below it, not the whole prefix.
    const int64_t replayed = s->rewind(to);
    EXPECT_LE(replayed, 32) << "rewind to " << to;
    ASSERT_EQ(s->n_past(), to);
    const auto want = fresh_logits(std::vector<int32_t>(a.begin(), a.begin() + to));
    const auto got = s->logits();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "rewind to " << to << " logit " << i;
  }
  // A diverging continuation after a rewind (sync onto a different suffix) is exact too.
  auto b = std::vector<int32_t>(a.begin(), a.begin() + 70);
  const auto tail = seq(30, 3);
  b.insert(b.end(), tail.begin(), tail.end());
  s->sync(b);
  const auto want = fresh_logits(b);
  const auto got = s->logits();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
}

TEST(Qwen35MoeSession, PayloadRoundTrips) {
  auto s = engine()->new_session();
  const auto a = seq(90, 4);
  s->eval(a);
  const auto bytes = s->save_payload();
  auto t = engine()->new_session();
  t->load_payload(bytes);
  EXPECT_EQ(t->tokens(), s->tokens());
  const auto more = seq(12, 5);
  s->eval(more);
  t->eval(more);
  const auto ls = s->logits(), lt = t->logits();
  for (size_t i = 0; i < ls.size(); ++i) ASSERT_EQ(ls[i], lt[i]) << i;

  auto bad = bytes;
  bad[bad.size() / 2] ^= 1;
  try {
    t->load_payload(bad);
    FAIL() << "corrupt payload accepted";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

// A payload saved on another qwen35moe model (another layout and seed) is refused by the model
// id, naming both, before any of its state is read.
TEST(Qwen35MoeSession, PayloadOfAnotherModelIsRefused) {
  const fs::path d = ds4::test::test_tmp_dir() / ("ds4_qwen_session_other_" + std::to_string(::getpid()));
  ds4::test::QwenTiny c;
  c.layers = {"linear_attention", "linear_attention", "full_attention", "linear_attention"};
  ds4::test::write_qwen_checkpoint((d / "hf").string(), c, 22);
  ds4::convert::ConvertOptions co;
  co.hf_dir = (d / "hf").string();
  co.out_path = (d / "other.gguf").string();
  co.recipe = ds4::convert::Recipe::F32;
  ds4::convert::convert_hf(co);
  ds4::EngineOptions eo;
  eo.model_path = co.out_path;
  eo.threads = 2;
  eo.ctx_size = 512;
  auto other = ds4::Engine::open(eo)->new_session();
  other->eval(seq(20, 6));
  const auto bytes = other->save_payload();
  auto s = engine()->new_session();
  try {
    s->load_payload(bytes);
    FAIL() << "a payload of another model was accepted";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved with model"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->n_past(), 0);
}
