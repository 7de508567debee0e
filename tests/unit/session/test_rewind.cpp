// Rewind exactness. The oracle is a fresh session evaluating the same prefix: after rewind(n)
// the whole state (tokens, logits, sliding-window rings, compressor windows and rows, as
// serialized by save_payload) must be byte-identical to it.
//
// "Same path kind": a rewind replays from a checkpoint in its own chunk, so the fresh session
// uses the same chunk boundaries (same max_batch and checkpoint interval: chunks end at
// multiples of both). A second test compares against one unchunked prefill and a token-by-
// token evaluation; the CPU backend computes each row with the same arithmetic whatever the
// batch (compute/backend.h), so that too is asserted byte-exact.
#include "session_fixture.h"

namespace ds4::test {
namespace {

// Index of the first differing byte, or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::min(a.size(), b.size()));
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

TEST(Rewind, StateEqualsAFreshPrefillOfThePrefixAtEveryKindOfTarget) {
  auto e = open_engine(/*max_batch=*/5);
  SessionOptions so;
  so.checkpoint_interval = 16;
  const auto toks = random_tokens(73, 11);  // 70 evaluated, 3 more to continue after the rewind
  const auto first70 = std::span(toks).first(70);
  // Targets: start, inside the first window (8), ratio boundaries (4, 8), checkpoint positions
  // (16, 32, 64) and their neighbours, the end.
  for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 45, 63, 64, 65, 69, 70}) {
    auto s = e->new_session(so);
    s->eval(first70);
    const int64_t replayed = s->rewind(n);
    EXPECT_LT(replayed, 16) << "n=" << n;  // never more than one interval
    auto fresh = e->new_session(so);
    fresh->eval(std::span(toks).first(static_cast<size_t>(n)));
    EXPECT_EQ(s->tokens(), fresh->tokens());
    EXPECT_EQ(first_difference(s->save_payload(), fresh->save_payload()), -1) << "rewind to " << n;
    // And the session goes on exactly like the fresh one.
    s->eval(std::span(toks).subspan(static_cast<size_t>(n), 3));
    fresh->eval(std::span(toks).subspan(static_cast<size_t>(n), 3));
    EXPECT_EQ(first_difference(s->save_payload(), fresh->save_payload()), -1) << "after rewind to " << n;
  }
}

TEST(Rewind, WithoutCheckpointsReplaysFromTheStart) {
  auto e = open_engine();
  SessionOptions so;
  so.checkpoint_interval = 0;
  so.max_checkpoints = 0;
  auto s = e->new_session(so);
  const auto toks = random_tokens(30, 12);
  s->eval(toks);
  EXPECT_EQ(s->rewind(21), 21);
  auto fresh = e->new_session(so);
  fresh->eval(std::span(toks).first(21));
  EXPECT_EQ(first_difference(s->save_payload(), fresh->save_payload()), -1);
  EXPECT_THROW(s->rewind(22), Error);
  EXPECT_THROW(s->rewind(-1), Error);
}

TEST(Rewind, RepeatedRewindsAndRegrowth) {
  auto e = open_engine(/*max_batch=*/7);
  SessionOptions so;
  so.checkpoint_interval = 8;
  so.max_checkpoints = 3;  // forces dropping old checkpoints
  auto s = e->new_session(so);
  auto a = random_tokens(50, 13);
  s->eval(a);
  s->rewind(41);
  auto b = random_tokens(20, 14);
  s->eval(b);
  s->rewind(12);  // below every kept checkpoint: replays from 0
  s->eval(b);
  std::vector<int32_t> want(a.begin(), a.begin() + 12);
  want.insert(want.end(), b.begin(), b.end());
  auto fresh = e->new_session(so);
  fresh->eval(std::span(want).first(12));
  fresh->eval(b);
  EXPECT_EQ(s->tokens(), want);
  EXPECT_EQ(first_difference(s->save_payload(), fresh->save_payload()), -1);
}

// Checkpoints at 8, 16, ..., 64 with room for 4: thinning keeps 16, 32, 56, 64 (worked out
// by hand from the rule in session.h), so no rewind replays more than 23 tokens (55 from
// 32); dropping the oldest instead would keep 40..64 and replay up to 39 (39 from 0).
TEST(Rewind, ThinnedCheckpointsBoundTheReplayEverywhere) {
  auto e = open_engine(/*max_batch=*/512);
  SessionOptions so;
  so.checkpoint_interval = 8;
  so.max_checkpoints = 4;
  const auto toks = random_tokens(64, 16);
  int64_t worst = 0;
  for (int64_t n = 0; n <= 64; ++n) {
    auto s = e->new_session(so);
    s->eval(toks);
    worst = std::max(worst, s->rewind(n));
    auto fresh = e->new_session(so);
    fresh->eval(std::span(toks).first(static_cast<size_t>(n)));
    ASSERT_EQ(first_difference(s->save_payload(), fresh->save_payload()), -1) << "rewind to " << n;
  }
  EXPECT_EQ(worst, 23);  // rewind to 55: from the checkpoint at 32 (40 and 48 were thinned)
}

TEST(Rewind, ChunkingDoesNotChangeTheState) {
  const auto toks = random_tokens(60, 15);
  auto chunked = open_engine(/*max_batch=*/5);
  auto whole = open_engine(/*max_batch=*/512);
  SessionOptions so;
  so.checkpoint_interval = 16;
  auto s = chunked->new_session(so);
  s->eval(toks);
  s->rewind(37);
  SessionOptions none;
  none.checkpoint_interval = 0;
  auto one_batch = whole->new_session(none);
  one_batch->eval(std::span(toks).first(37));
  auto by_token = whole->new_session(none);
  for (int i = 0; i < 37; ++i) by_token->eval(std::span(toks).subspan(static_cast<size_t>(i), 1));
  EXPECT_EQ(first_difference(s->save_payload(), one_batch->save_payload()), -1);
  EXPECT_EQ(first_difference(s->save_payload(), by_token->save_payload()), -1);
}

}  // namespace
}  // namespace ds4::test
