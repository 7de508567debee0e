// Session payloads: save at N tokens, load into a fresh session, continue: identical to the
// uninterrupted run (logits, state bytes, sampled tokens). Bad payloads fail with clear errors.
#include <xxhash.h>

#include <cstring>
#include <fstream>

#include "session_fixture.h"

namespace ds4::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

namespace {

TEST(Payload, ContinuingFromALoadedPayloadEqualsTheUninterruptedRun) {
  auto e = open_engine();
  const auto prompt = random_tokens(37, 21);
  SamplerConfig sc;
  sc.seed = 77;
  sc.min_p = 0;
  GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_stop_tokens = false;

  auto a = e->new_session();
  a->set_sampler(sc);
  a->eval(prompt);
  a->sample();  // move the RNG: the payload must carry its position
  const auto payload = a->save_payload();
  std::vector<int32_t> ga;
  std::vector<std::vector<float>> la;
  a->generate(go, [&](const GeneratedToken& t) {
    ga.push_back(t.id);
    return true;
  });

  auto b = e->new_session();
  b->set_sampler(sc);  // same filters; the RNG position comes from the payload
  b->load_payload(payload);
  EXPECT_EQ(b->n_past(), 37);
  EXPECT_EQ(b->tokens(), prompt);
  std::vector<int32_t> gb;
  b->generate(go, [&](const GeneratedToken& t) {
    gb.push_back(t.id);
    return true;
  });
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(to_vec(a->logits()), to_vec(b->logits()));
  EXPECT_TRUE(a->save_payload() == b->save_payload());
  // A rewind inside the loaded text works too (from the checkpoint taken at load).
  b->rewind(37);
  auto c = e->new_session();
  c->eval(prompt);
  EXPECT_EQ(to_vec(b->logits()), to_vec(c->logits()));
}

TEST(Payload, FileRoundTripAndEmptySession) {
  auto e = open_engine();
  const auto path = std::filesystem::path(DS4_BUILD_DIR) / "tests" / "session" /
                    ("payload_" + std::to_string(::getpid()) + ".ds4s");
  auto a = e->new_session();
  a->save(path.string());
  auto b = e->new_session();
  b->eval(random_tokens(4, 1));
  b->load(path.string());
  EXPECT_EQ(b->n_past(), 0);
  EXPECT_TRUE(b->logits().empty());
  a->eval(random_tokens(9, 2));
  a->save(path.string());
  b->load(path.string());
  EXPECT_EQ(to_vec(a->logits()), to_vec(b->logits()));
  std::filesystem::remove(path);
  EXPECT_NE(error_of([&] { b->load(path.string()); }).find("cannot open session payload"), std::string::npos);
}

TEST(Payload, RejectsOtherModelsAndDamagedBytesLeavingTheSessionUnchanged) {
  auto e = open_engine();
  auto a = e->new_session();
  a->eval(random_tokens(20, 3));
  const auto good = a->save_payload();

  auto b = e->new_session();
  b->eval(random_tokens(6, 4));
  const auto before = b->save_payload();

  // Another model (same shapes, other weights): named by its identity.
  auto other = open_engine(512, 2)->new_session();
  const std::string m = error_of([&] { other->load_payload(good); });
  EXPECT_NE(m.find("saved with model " + e->info().model_id), std::string::npos) << m;

  // Truncation at every length class, a flipped bit, a bad magic, a future version.
  for (size_t cut : {size_t(0), size_t(5), size_t(30), good.size() / 2, good.size() - 1}) {
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string msg = error_of([&] { b->load_payload(t); });
    EXPECT_NE(msg.find("session payload"), std::string::npos) << cut << ": " << msg;
  }
  auto flipped = good;
  flipped[flipped.size() / 3] ^= 0x10;
  EXPECT_NE(error_of([&] { b->load_payload(flipped); }).find("checksum mismatch"), std::string::npos);
  auto magic = good;
  magic[0] = 'X';
  EXPECT_NE(error_of([&] { b->load_payload(magic); }).find("bad magic"), std::string::npos);
  auto version = good;
  version[8] = 2;
  EXPECT_NE(error_of([&] { b->load_payload(version); }).find("version 2"), std::string::npos);

  // A payload too long for a smaller context.
  SessionOptions so;
  so.n_ctx = 10;
  auto small = e->new_session(so);
  EXPECT_THROW(small->load_payload(good), ContextOverflow);

  EXPECT_TRUE(b->save_payload() == before);
}

}  // namespace
}  // namespace ds4::test

namespace ds4::test {
namespace {

// Payload bytes with the trailing checksum recomputed, so the structural checks (not the
// checksum) must catch the damage.
std::vector<uint8_t> resealed(std::vector<uint8_t> p) {
  const uint64_t h = XXH64(p.data(), p.size() - 8, 0);
  std::memcpy(p.data() + p.size() - 8, &h, 8);
  return p;
}

TEST(Payload, StructuralDamageBehindAValidChecksumIsRejected) {
  auto e = open_engine();
  auto a = e->new_session();
  a->eval(random_tokens(21, 5));
  const auto good = a->save_payload();
  auto b = e->new_session();
  // Header layout (docs/FORMATS.md): magic 0, version 8, reserved 12, hash 16, shapes 24..47,
  // n_pos 48, n_ctx 56, rng 64..79, tokens 80...
  auto huge = good;
  const uint64_t big = 1ull << 60;
  std::memcpy(huge.data() + 48, &big, 8);
  EXPECT_NE(error_of([&] { b->load_payload(resealed(huge)); }).find("context overflow"), std::string::npos);
  auto longer = good;
  const uint64_t n22 = 22;  // one token more than the bytes hold
  std::memcpy(longer.data() + 48, &n22, 8);
  EXPECT_NE(error_of([&] { b->load_payload(resealed(longer)); }).find("session payload"), std::string::npos);
  auto shape = good;
  shape[28] ^= 1;  // n_vocab
  EXPECT_NE(error_of([&] { b->load_payload(resealed(shape)); }).find("n_vocab is"), std::string::npos);
  auto token = good;
  const int32_t bad_id = 5000;
  std::memcpy(token.data() + 80 + 4 * 3, &bad_id, 4);
  EXPECT_NE(error_of([&] { b->load_payload(resealed(token)); }).find("token 5000 at index 3"), std::string::npos);
  auto extra = good;
  extra.insert(extra.end() - 8, 4, uint8_t{0});
  EXPECT_NE(error_of([&] { b->load_payload(resealed(extra)); }).find("4 unexpected bytes"), std::string::npos);

  // Random damage anywhere: either a clean ds4::Error or (a changed float) a successful load;
  // never a crash (this test also runs under ASan + UBSan: session_asan).
  std::mt19937 g(9);
  int rejected = 0;
  for (int i = 0; i < 300; ++i) {
    auto p = good;
    const int flips = 1 + static_cast<int>(g() % 4);
    for (int f = 0; f < flips; ++f) p[g() % (p.size() - 8)] ^= static_cast<uint8_t>(1u << (g() % 8));
    try {
      b->load_payload(resealed(p));
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace ds4::test
