// Session payloads: save at N tokens, load into a fresh session, continue: identical to the
// uninterrupted run (logits, state bytes, sampled tokens). Bad payloads fail with clear errors.
#include <fstream>

#include "session_fixture.h"

namespace ds4::test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
