// Directional steering: the direction file format and its validation, the hook (scale 0 is
// bit-identical to no steering; a scale adds exactly s*v to every stream), steer::build, and
// that payloads record the steering so a state computed under other steering is not reused.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "compute/backend.h"
#include "session/engine_impl.h"
#include "session/steering.h"
#include "session_fixture.h"

namespace ds4::test {
namespace {

using model::deepseek4::Sublayer;

std::string err_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Random unit directions for layers [first, first+count) of `e`'s model.
steer::Directions random_directions(const Engine& e, uint32_t first, uint32_t count, uint32_t seed) {
  const auto& hp = e.impl().model->hparams();
  steer::Directions d;
  d.model_id = e.info().model_id;
  d.model_layers = static_cast<uint32_t>(hp.n_layer);
  d.first = first;
  d.count = count;
  d.dim = static_cast<uint32_t>(hp.n_embd);
  d.n_positive = 3;
  d.n_negative = 4;
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  for (auto* v : {&d.attn, &d.ffn}) {
    v->resize(static_cast<size_t>(count) * d.dim);
    for (uint32_t l = 0; l < count; ++l) {
      double n = 0;
      for (uint32_t i = 0; i < d.dim; ++i) n += std::pow((*v)[l * d.dim + i] = nd(g), 2);
      for (uint32_t i = 0; i < d.dim; ++i) (*v)[l * d.dim + i] = static_cast<float>((*v)[l * d.dim + i] / std::sqrt(n));
    }
  }
  return d;
}

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(DS4_BUILD_DIR) / "tests" / "session";
  std::filesystem::create_directories(dir);
  return (dir / (name + "_" + std::to_string(::getpid()))).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Rewrites the trailing checksum so that a deliberately edited field is what the decoder sees.
void reseal(std::vector<uint8_t>& b) {
  const uint64_t h = XXH64(b.data(), b.size() - 8, 0);
  std::memcpy(b.data() + b.size() - 8, &h, 8);
}

std::shared_ptr<const Engine> open_steered(const std::string& file, float attn, float ffn) {
  EngineOptions o;
  o.model_path = chat_model_path();
  o.threads = 2;
  o.dir_steering_file = file;
  o.dir_steering_attn = attn;
  o.dir_steering_ffn = ffn;
  return Engine::open(o);
}

TEST(SteeringFile, RoundTripsEveryField) {
  auto e = open_engine();
  const auto d = random_directions(*e, 1, 2, 5);
  const auto b = steer::encode(d);
  EXPECT_EQ(b.size(), steer::kHeaderBytes + 2u * 2u * d.dim * 4u + 8u);
  EXPECT_EQ(std::memcmp(b.data(), "DS4STEER", 8), 0);
  const auto r = steer::decode(b, "mem");
  EXPECT_EQ(r.model_id, d.model_id);
  EXPECT_EQ(r.model_layers, d.model_layers);
  EXPECT_EQ(r.first, 1u);
  EXPECT_EQ(r.count, 2u);
  EXPECT_EQ(r.dim, d.dim);
  EXPECT_EQ(r.n_positive, 3u);
  EXPECT_EQ(r.n_negative, 4u);
  EXPECT_EQ(r.attn, d.attn);
  EXPECT_EQ(r.ffn, d.ffn);
  EXPECT_EQ(r.vec(0, Sublayer::Attention), nullptr);
  EXPECT_EQ(r.vec(3, Sublayer::Ffn), nullptr);
  ASSERT_NE(r.vec(2, Sublayer::Ffn), nullptr);
  EXPECT_EQ(r.vec(2, Sublayer::Ffn)[0], d.ffn[d.dim]);
}

TEST(SteeringFile, BadFilesFailWithTheReason) {
  auto e = open_engine();
  const auto good = steer::encode(random_directions(*e, 0, 2, 6));
  auto msg = [&](std::vector<uint8_t> b) { return err_of([&] { steer::decode(b, "x.f32"); }); };
  // Every truncation is an error naming the file, never a crash.
  for (size_t n = 0; n < good.size(); n += 7) {
    const std::string m = msg(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_NE(m.find("x.f32"), std::string::npos) << n;
  }
  EXPECT_NE(msg({good.begin(), good.end() - 1}).find("truncated"), std::string::npos);
  EXPECT_NE(msg({good.begin(), good.begin() + 100}).find("truncated"), std::string::npos);
  auto b = good;
  b[0] = 'X';
  EXPECT_NE(msg(b).find("bad magic"), std::string::npos);
  b = good;
  b[8] = 2;
  EXPECT_NE(msg(b).find("version 2"), std::string::npos);
  b = good;
  b[steer::kHeaderBytes + 5] ^= 1;
  EXPECT_NE(msg(b).find("checksum"), std::string::npos);
  b = good;
  b.push_back(0);
  EXPECT_NE(msg(b).find("bytes;"), std::string::npos);
  b = good;
  b[36] = 3;  // first layer 3 of 4 layers, 2 layers
  reseal(b);
  EXPECT_NE(msg(b).find("exceed the model's 4 layers"), std::string::npos) << msg(b);
  b = good;
  b[40] = 0;
  reseal(b);
  EXPECT_NE(msg(b).find("layer count"), std::string::npos);
  b = good;
  b[16] = 'G';
  reseal(b);
  EXPECT_NE(msg(b).find("model id"), std::string::npos);
  b = good;
  const float nan = std::nanf("");
  std::memcpy(b.data() + steer::kHeaderBytes + 12, &nan, 4);
  reseal(b);
  EXPECT_NE(msg(b).find("non-finite"), std::string::npos);
}

TEST(SteeringFile, AnotherModelsFileIsAClearError) {
  auto e1 = open_engine(512, 1);
  auto e2 = open_engine(512, 2);
  ASSERT_NE(e1->info().model_id, e2->info().model_id);
  const std::string path = temp_path("steer_model1.f32");
  steer::save(path, random_directions(*e1, 0, 4, 7));
  EngineOptions o;
  o.model_path = chat_model_path(2);
  o.threads = 2;
  o.dir_steering_file = path;
  o.dir_steering_attn = 1;
  const std::string m = err_of([&] { Engine::open(o); });
  EXPECT_NE(m.find("built for model " + e1->info().model_id), std::string::npos) << m;
  EXPECT_NE(m.find(e2->info().model_id), std::string::npos) << m;
  o.dir_steering_file = temp_path("missing.f32");
  EXPECT_NE(err_of([&] { Engine::open(o); }).find("cannot open steering file"), std::string::npos);
  o.dir_steering_file.clear();
  EXPECT_NE(err_of([&] { Engine::open(o); }).find("need --dir-steering-file"), std::string::npos);
  auto s = e1->new_session();
  EXPECT_NE(err_of([&] { s->set_steering(1, 0); }).find("need a steering file"), std::string::npos);
  std::filesystem::remove(path);
}

std::vector<float> logits_after(const Engine& e, const std::vector<int32_t>& toks, float attn, float ffn) {
  auto s = e.new_session();
  s->set_steering(attn, ffn);
  s->eval(toks);
  return to_vec(s->logits());
}

TEST(Steering, ScaleZeroIsBitIdenticalToNoSteeringAndAScaleIsNot) {
  auto plain = open_engine();
  const std::string path = temp_path("steer_zero.f32");
  steer::save(path, random_directions(*plain, 0, 4, 8));
  auto steered = open_steered(path, 0, 0);
  EXPECT_EQ(steered->info().steering_layers, 4);
  const auto toks = random_tokens(29, 3);
  const auto base = logits_after(*plain, toks, 0, 0);
  const auto zero = logits_after(*steered, toks, 0, 0);
  ASSERT_EQ(base.size(), zero.size());
  EXPECT_EQ(std::memcmp(base.data(), zero.data(), base.size() * sizeof(float)), 0);
  // The test can fail: a non-zero scale on either sublayer changes the logits.
  EXPECT_NE(logits_after(*steered, toks, 4, 0), base);
  EXPECT_NE(logits_after(*steered, toks, 0, 4), base);
  std::filesystem::remove(path);
}

// Independent reference of the hook: downloads X, adds s*v to every stream on the host in
// double-free float arithmetic, uploads it back.
class HostAddHook : public model::deepseek4::LayerHook {
 public:
  HostAddHook(const steer::Directions& d, int n_hc, float a, float f) : d_(d), n_hc_(n_hc), a_(a), f_(f) {}
  void after_sublayer(compute::Backend& be, int64_t il, Sublayer w, float* X, int64_t rows, int64_t) override {
    const float* v = d_.vec(il, w);
    const float s = w == Sublayer::Attention ? a_ : f_;
    if (!v || s == 0) return;
    std::vector<float> h(static_cast<size_t>(rows) * n_hc_ * d_.dim);
    be.download(h.data(), X, h.size() * 4);
    for (size_t k = 0; k < h.size(); ++k) h[k] += s * v[k % d_.dim];
    be.upload(X, h.data(), h.size() * 4);
  }

 private:
  const steer::Directions& d_;
  int n_hc_;
  float a_, f_;
};

TEST(Steering, TheHookAddsTheScaledVectorToEveryStreamOfTheCoveredLayers) {
  auto e = open_engine();
  const auto& m = *e->impl().model;
  const auto d = random_directions(*e, 1, 2, 9);
  const auto toks = random_tokens(19, 4);
  auto run = [&](model::deepseek4::LayerHook* hook) {
    auto be = compute::make_cpu_backend(e->impl().pool.get());
    auto st = m.new_state(*be, 64);
    std::vector<float> all(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
    m.eval(*be, st, toks, all.data(), hook);
    return all;
  };
  steer::SteerHook hook(d, m.hparams().n_hc, 2.5f, -1.5f);
  HostAddHook ref(d, m.hparams().n_hc, 2.5f, -1.5f);
  const auto a = run(&hook), b = run(&ref), plain = run(nullptr);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  EXPECT_NE(a, plain);
}

TEST(Steering, BuildGivesUnitDirectionsAndRejectsIdenticalSets) {
  auto e = open_engine();
  const std::vector<std::vector<int32_t>> pos = {random_tokens(12, 1), random_tokens(9, 2)};
  const std::vector<std::vector<int32_t>> neg = {random_tokens(15, 3)};
  for (auto p : {steer::Position::Last, steer::Position::Mean}) {
    const auto d = steer::build(*e, pos, neg, 1, 3, p);
    EXPECT_EQ(d.first, 1u);
    EXPECT_EQ(d.count, 3u);
    EXPECT_EQ(d.model_id, e->info().model_id);
    EXPECT_EQ(d.n_positive, 2u);
    EXPECT_EQ(d.n_negative, 1u);
    for (const auto* v : {&d.attn, &d.ffn})
      for (uint32_t l = 0; l < d.count; ++l) {
        double n = 0;
        for (uint32_t i = 0; i < d.dim; ++i) n += double((*v)[l * d.dim + i]) * (*v)[l * d.dim + i];
        EXPECT_NEAR(n, 1.0, 1e-5);  // float rounding of a double-normalized vector
      }
  }
  // "last" of a one-prompt set equals that prompt's own last-token state: mean(pos) - mean(neg)
  // of sets that share their only prompt is zero.
  EXPECT_NE(err_of([&] { steer::build(*e, neg, neg, 0, 4, steer::Position::Last); }).find("same mean activation"),
            std::string::npos);
  EXPECT_NE(err_of([&] { steer::build(*e, pos, neg, 2, 3, steer::Position::Last); }).find("outside"),
            std::string::npos);
}

TEST(Steering, PayloadsRecordTheSteeringAndRefuseAnotherOne) {
  auto plain = open_engine();
  const std::string path = temp_path("steer_payload.f32");
  steer::save(path, random_directions(*plain, 0, 4, 10));
  auto e = open_steered(path, 3, 1);
  const auto toks = random_tokens(21, 5);

  auto a = e->new_session();  // starts at the engine's 3 / 1
  a->eval(toks);
  const auto steered = a->save_payload();
  auto b = e->new_session();
  b->load_payload(steered);  // same steering: reused
  EXPECT_EQ(to_vec(b->logits()), to_vec(a->logits()));

  auto c = e->new_session();
  c->set_steering(0, 0);
  std::string m = err_of([&] { c->load_payload(steered); });
  EXPECT_NE(m.find("computed under steering file"), std::string::npos) << m;
  EXPECT_NE(m.find("this session runs no steering"), std::string::npos) << m;
  c->set_steering(3, 2);
  EXPECT_NE(err_of([&] { c->load_payload(steered); }).find("attn 3 / ffn 2"), std::string::npos);

  c->set_steering(0, 0);
  c->eval(toks);
  const auto plain_payload = c->save_payload();
  m = err_of([&] { b->load_payload(plain_payload); });
  EXPECT_NE(m.find("computed under no steering"), std::string::npos) << m;
  // A plain payload from the engine without a file loads into a scale-0 session of this one.
  auto p = plain->new_session();
  p->eval(toks);
  c->load_payload(p->save_payload());
  EXPECT_EQ(to_vec(c->logits()), to_vec(p->logits()));

  // Scales changed while the state grew (REPL /steer): never loaded as if uniform.
  auto d = e->new_session();
  d->eval(std::span(toks).first(10));
  d->set_steering(1, 1);
  d->eval(std::span(toks).subspan(10));
  const auto mixed = d->save_payload();
  auto f = e->new_session();
  f->set_steering(3, 1);
  EXPECT_NE(err_of([&] { f->load_payload(mixed); }).find("changed while the state grew"), std::string::npos);
  // Moving a live conversation (the REPL's /ctx) keeps it, and its record: still refused later.
  f->load_payload_any_steering(mixed);
  EXPECT_EQ(to_vec(f->logits()), to_vec(d->logits()));
  EXPECT_TRUE(f->save_payload() == mixed);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ds4::test
