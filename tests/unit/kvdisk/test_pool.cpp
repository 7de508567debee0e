// Session pool over the chat test model: restart resumes from disk with the logits of a full
// prefill, three conversations round-robin over two sessions never re-prefill from scratch,
// a short unrelated request between two turns keeps the long prefix (the opencode title
// request), save points land where documented, damaged / foreign files fall back to prefill.
#include <gtest/gtest.h>

#include "../session/session_fixture.h"
#include "core/error.h"
#include "kv_test_util.h"
#include "kvdisk/pool.h"
#include "session/steering.h"

namespace ds4::kvdisk {
namespace {

using ds4::test::open_engine;
using ds4::test::random_tokens;
using ds4::test::to_vec;
using namespace test;

std::unique_ptr<Store> open_store(const std::string& dir, const Engine& e, std::vector<std::string>* warnings = nullptr) {
  StoreOptions so;
  so.dir = dir;
  so.model_id = e.info().model_id;
  if (warnings) so.warn = [warnings](const std::string& m) { warnings->push_back(m); };
  else so.warn = [](const std::string&) {};
  return Store::open(so);
}

PoolOptions small_policy(int max_sessions) {
  PoolOptions o;
  o.max_sessions = max_sessions;
  o.policy.min_tokens = 16;
  o.policy.cold_max_tokens = 1000;
  o.policy.continued_interval = 0;
  o.policy.boundary_trim = 4;
  o.policy.boundary_align = 64;
  return o;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint64_t> token_counts(const Store& s) {
  std::vector<uint64_t> v;
  for (const auto& e : s.entries()) v.push_back(e.n_tokens);
  std::sort(v.begin(), v.end());
  return v;
}

// Logits of a fresh session over the same tokens (the reference a cache hit must equal).
std::vector<float> fresh_logits(const std::shared_ptr<const Engine>& e, const std::vector<int32_t>& t) {
  auto s = e->new_session();
  s->sync(t);
  return to_vec(s->logits());
}

TEST(KvPool, RestartResumesFromDiskWithTheLogitsOfAFullPrefill) {
  auto e = open_engine();
  const std::string dir = scratch_dir("d");
  const auto a = random_tokens(100, 11);
  {
    auto store = open_store(dir, *e);
    SessionPool pool(e, small_policy(2), store.get());
    const PoolSync r = pool.sync(a);
    EXPECT_TRUE(r.new_conversation);
    EXPECT_EQ(r.reused, 0);
    EXPECT_EQ(r.evaluated, 100);
    // Cold point: 100 - 4 = 96, aligned down to 64.
    EXPECT_EQ(token_counts(*store), (std::vector<uint64_t>{64}));
    const auto gen = random_tokens(5, 12);
    pool.current().eval(gen);  // a reply
    pool.save_all();           // shutdown point: the last prompt - trim = 96
    EXPECT_EQ(token_counts(*store), (std::vector<uint64_t>{64, 96}));
    EXPECT_EQ(store->stats().saves_by_reason[static_cast<int>(SaveReason::Shutdown)], 1u);
  }
  auto store = open_store(dir, *e);
  SessionPool pool(e, small_policy(2), store.get());
  const auto b = concat(a, random_tokens(30, 13));
  const PoolSync r = pool.sync(b);
  EXPECT_EQ(r.from_disk, 96);
  EXPECT_EQ(r.reused, 96);
  EXPECT_EQ(r.evaluated, 34);
  EXPECT_EQ(pool.current().tokens(), b);
  EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e, b));
  EXPECT_EQ(store->stats().hits, 1u);
}

TEST(KvPool, ThreeConversationsRoundRobinOverTwoSessionsNeverPrefillFromScratch) {
  auto e = open_engine();
  const std::string dir = scratch_dir("d");
  auto store = open_store(dir, *e);
  SessionPool pool(e, small_policy(2), store.get());
  std::vector<std::vector<int32_t>> conv(3);
  for (int c = 0; c < 3; ++c) conv[c] = random_tokens(60, 100 + c);
  int64_t disk_turns = 0;
  for (int round = 0; round < 4; ++round) {
    for (int c = 0; c < 3; ++c) {
      const int64_t before = static_cast<int64_t>(conv[c].size());
      if (round > 0) conv[c] = concat(conv[c], random_tokens(40, 1000 + round * 10 + c));
      const PoolSync r = pool.sync(conv[c]);
      SCOPED_TRACE(::testing::Message() << "round " << round << " conversation " << c);
      if (round == 0) {
        EXPECT_EQ(r.reused, 0);
      } else {
        // From RAM (the whole previous prompt) or from disk (its evict point, prompt - trim).
        EXPECT_GE(r.reused, before - 4);
        EXPECT_LE(r.evaluated, static_cast<int64_t>(conv[c].size()) - before + 4);
        if (r.from_disk > 0) ++disk_turns;
      }
      EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e, conv[c]));
      pool.current().eval(random_tokens(3, 7 + round * 3 + c));  // the reply
    }
  }
  EXPECT_GT(disk_turns, 0);
  EXPECT_GT(pool.stats().ram_evictions, 0u);
  EXPECT_EQ(pool.stats().live_sessions, 2);
  EXPECT_GT(store->stats().saves_by_reason[static_cast<int>(SaveReason::Evict)], 0u);
}

// opencode sends a short title-generation request (its own system prompt) between two turns
// of the long conversation: the long one must keep its prefix.
TEST(KvPool, ShortUnrelatedRequestBetweenTurnsKeepsTheLongPrefix) {
  auto e = open_engine();
  const auto bos = std::vector<int32_t>{256};
  const auto a1 = concat(bos, random_tokens(300, 21));
  const auto title = concat(bos, random_tokens(20, 22));
  const auto a2 = concat(a1, random_tokens(50, 23));
  {  // two sessions in RAM, no disk
    SessionPool pool(e, small_policy(2), nullptr);
    pool.sync(a1);
    pool.current().eval(random_tokens(5, 24));
    const PoolSync t = pool.sync(title);
    EXPECT_TRUE(t.new_conversation);
    EXPECT_EQ(t.reused, 0);  // a new session, not the long one (which shares only BOS)
    const PoolSync r = pool.sync(a2);
    EXPECT_FALSE(r.new_conversation);
    EXPECT_EQ(r.reused, static_cast<int64_t>(a1.size()));
    EXPECT_EQ(r.evaluated, 50);
    EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e, a2));
  }
  {  // one session: the title request evicts the conversation to disk, the next turn loads it
    const std::string dir = scratch_dir("d");
    auto store = open_store(dir, *e);
    SessionPool pool(e, small_policy(1), store.get());
    pool.sync(a1);
    pool.current().eval(random_tokens(5, 24));
    pool.sync(title);
    const PoolSync r = pool.sync(a2);
    EXPECT_EQ(r.from_disk, static_cast<int64_t>(a1.size()) - 4);
    EXPECT_EQ(r.evaluated, 54);
    EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e, a2));
  }
}

TEST(KvPool, ContinuedSavesLandOnIntervalFrontiersInPrefillAndGeneration) {
  auto e = open_engine();
  const std::string dir = scratch_dir("d");
  auto store = open_store(dir, *e);
  PoolOptions o = small_policy(2);
  o.policy.cold_max_tokens = 0;
  o.policy.continued_interval = 32;
  o.policy.boundary_trim = 0;
  SessionPool pool(e, o, store.get());
  const auto a = random_tokens(100, 31);
  const PoolSync r = pool.sync(a);
  EXPECT_EQ(r.evaluated, 100);
  EXPECT_EQ(token_counts(*store), (std::vector<uint64_t>{32, 64, 96}));
  for (int32_t t : random_tokens(40, 32)) {
    pool.current().eval(std::span<const int32_t>(&t, 1));
    pool.after_append();
  }
  EXPECT_EQ(token_counts(*store), (std::vector<uint64_t>{32, 64, 96, 128}));
  EXPECT_EQ(store->stats().saves_by_reason[static_cast<int>(SaveReason::Continued)], 4u);
  // Every saved state equals a fresh evaluation of its tokens.
  auto probe = e->new_session();
  for (const auto& en : store->entries()) {
    auto d = store->load(en.key);
    ASSERT_TRUE(d.has_value());
    probe->load_payload(d->payload);
    EXPECT_EQ(probe->n_past(), static_cast<int64_t>(en.n_tokens));
    EXPECT_EQ(e->tokenizer().decode(probe->tokens()), d->text);
    EXPECT_EQ(to_vec(probe->logits()), fresh_logits(e, probe->tokens()));
  }
}

TEST(KvPool, ForeignModelAndUnloadablePayloadFallBackToPrefill) {
  auto e1 = open_engine(512, 1);
  auto e2 = open_engine(512, 2);
  ASSERT_NE(e1->info().model_id, e2->info().model_id);
  const std::string dir = scratch_dir("d");
  const auto a = random_tokens(100, 41);
  {
    auto store = open_store(dir, *e1);
    SessionPool pool(e1, small_policy(2), store.get());
    pool.sync(a);
    EXPECT_EQ(store->entries().size(), 1u);
  }
  std::vector<std::string> warnings;
  auto store = open_store(dir, *e2, &warnings);
  EXPECT_TRUE(store->entries().empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("written for model " + e1->info().model_id), std::string::npos) << warnings[0];

  // A well-formed cache file whose payload the session rejects: removed, full prefill.
  const std::string text = e2->tokenizer().decode(std::span<const int32_t>(a).first(64));
  ASSERT_TRUE(store->save(SaveReason::Cold, text, 64, 4096, pattern(1000, 1)));
  SessionPool pool(e2, small_policy(2), store.get());
  const PoolSync r = pool.sync(a);
  EXPECT_EQ(r.from_disk, 0);
  EXPECT_EQ(r.evaluated, 100);
  EXPECT_EQ(store->stats().misses, 1u);
  EXPECT_EQ(store->stats().removed_bad, 2u);  // the foreign file, then this one
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[1].find("session payload"), std::string::npos) << warnings[1];
  // The cold save of this prefill (100 - 4 aligned down to 64) wrote a good file in its place.
  auto d = store->load(Sha1::of(text));
  ASSERT_TRUE(d.has_value());
  auto probe = e2->new_session();
  probe->load_payload(d->payload);
  EXPECT_EQ(probe->n_past(), 64);
  EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e2, a));
}

// The disk cache never hands a prefix computed under one steering to a run with another: the
// payload records the steering (docs/FORMATS.md), the session refuses it, the pool prefills.
TEST(KvPool, APrefixComputedUnderOtherSteeringIsNotReused) {
  auto plain = open_engine();
  const std::string sdir = scratch_dir("s");
  const std::string file = sdir + "/dir.f32";
  ds4::steer::save(file, ds4::steer::build(*plain, {random_tokens(20, 1), random_tokens(25, 2)},
                                           {random_tokens(22, 3)}, 0, plain->info().n_layer,
                                           ds4::steer::Position::Mean));
  auto steered = [&](float attn, float ffn) {
    EngineOptions o = plain->options();
    o.dir_steering_file = file;
    o.dir_steering_attn = attn;
    o.dir_steering_ffn = ffn;
    return Engine::open(o);
  };
  const auto a = random_tokens(100, 51);
  const std::string dir = scratch_dir("d");
  auto e1 = steered(2, 1);
  {
    auto store = open_store(dir, *e1);
    SessionPool pool(e1, small_policy(2), store.get());
    pool.sync(a);  // cold save at 64 tokens, under steering 2 / 1
    EXPECT_EQ(token_counts(*store), (std::vector<uint64_t>{64}));
  }
  // The same model without steering: no reuse, and the logits of a plain prefill.
  {
    auto store = open_store(dir, *plain);
    SessionPool pool(plain, small_policy(2), store.get());
    const PoolSync r = pool.sync(a);
    EXPECT_EQ(r.from_disk, 0);
    EXPECT_EQ(r.evaluated, 100);
    EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(plain, a));
    EXPECT_NE(to_vec(pool.current().logits()), fresh_logits(e1, a));  // steering did change them
  }
  // The plain run's cold save replaced the steered file. Under other scales: no reuse either.
  {
    auto e2 = steered(2, 0.5f);
    auto store = open_store(dir, *e2);
    SessionPool pool(e2, small_policy(2), store.get());
    const PoolSync r = pool.sync(a);
    EXPECT_EQ(r.from_disk, 0);
    EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e2, a));
  }
  // Under the same steering as the file's: reused, with the logits of a steered prefill.
  {
    auto e3 = steered(2, 0.5f);
    auto store = open_store(dir, *e3);
    SessionPool pool(e3, small_policy(2), store.get());
    const PoolSync r = pool.sync(a);
    EXPECT_EQ(r.from_disk, 64);
    EXPECT_EQ(to_vec(pool.current().logits()), fresh_logits(e3, a));
  }
}

TEST(KvPool, ContextOverflowIsThrownBeforeAnySessionChanges) {
  auto e = open_engine(512, 1, 256);
  SessionPool pool(e, small_policy(1), nullptr);
  const auto a = random_tokens(100, 51);
  pool.sync(a);
  EXPECT_THROW(pool.sync(random_tokens(300, 52)), ContextOverflow);
  EXPECT_EQ(pool.current().tokens(), a);
}

TEST(KvPool, SessionsThatFitFollowTheMemoryPlan) {
  MemoryPlan p;
  p.state_bytes_at_ctx = 1000;
  p.checkpoint_bytes = 100;
  EXPECT_EQ(sessions_that_fit(p, 8, 100000, 3), 3);
  EXPECT_EQ(sessions_that_fit(p, 8, 2 * 1800 * 2, 3), 2);
  EXPECT_EQ(sessions_that_fit(p, 8, 10, 3), 1);
}

}  // namespace
}  // namespace ds4::kvdisk
