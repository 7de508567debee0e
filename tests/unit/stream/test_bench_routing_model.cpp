// Benchmark routing in live runs (EngineOptions::bench_routing, model Options::bench_routing) on
// the CPU backend: the learned layers route to the source's ids (hash layers keep tid2eid),
// the routing weights are the router's scores at those ids, streaming stays bit-identical to
// resident under it, repeated runs agree, and with it off nothing changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "compute/backends.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "model/deepseek4/model.h"
#include "stream/provider.h"
#include "stream/synthetic_routing.h"
#include "stream/trace.h"
#include "stream_fixture.h"

using namespace ds4;
using namespace ds4::model::deepseek4;
namespace fs = std::filesystem;

namespace {

const char* kDemo = DS4_SOURCE_DIR "/models/ds4-demo.gguf";

struct Logits {
  std::vector<float> prefill, decode;
};

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return t;
}

int32_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return static_cast<int32_t>(b);
}

// A prefill in chunks of 8 and a greedy continuation of `steps` tokens.
Logits run(const std::string& path, stream::ExpertProvider* xp, const stream::ZipfRouter* router, int64_t n_prompt,
        int steps) {
  Options o;
  o.experts = xp;
  o.bench_routing = router;
  o.max_batch = 8;
  auto m = Model::from_file(gguf::File::open(path), o);
  ThreadPool pool(2);
  auto be = compute::make_cpu_backend(&pool);
  m->register_weights(*be);
  const int64_t V = m->hparams().n_vocab;
  const auto toks = prompt(n_prompt, V);
  Logits r;
  r.prefill.resize(toks.size() * static_cast<size_t>(V));
  State st = m->new_state(*be, n_prompt + steps + 1);
  m->eval(*be, st, toks, r.prefill.data());
  int32_t next = argmax(r.prefill.data() + (toks.size() - 1) * V, V);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> lg(static_cast<size_t>(V));
    m->eval(*be, st, std::span(&next, 1), lg.data());
    r.decode.insert(r.decode.end(), lg.begin(), lg.end());
    next = argmax(lg.data(), V);
  }
  return r;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

stream::ZipfRouter demo_router(uint64_t seed) {
  const auto hp = HParams::from_gguf(gguf::File::open(kDemo));
  stream::ZipfRoutingParams p;
  p.n_layer = hp.n_layer, p.n_expert = hp.n_expert, p.k = hp.n_expert_used, p.seed = seed;
  return stream::ZipfRouter(p);
}

std::unique_ptr<stream::ExpertProvider> provider(const std::string& path, int64_t slots, bool prefetch,
                                                 const std::string& trace = "") {
  stream::ProviderOptions o;
  o.budget_slots = slots;
  o.policy = stream::PolicyKind::Lru;
  o.prefetch_hash = o.prefetch_lookahead = o.protect = prefetch;
  o.store.packed_path = "-";
  o.trace_path = trace;
  gguf::File f = gguf::File::open(path);
  return stream::ExpertProvider::open(f, o);
}

}  // namespace

TEST(BenchRouting, MoeRouteWeightsComeFromTheRouterScoresAtTheForcedIds) {
  // The spec's router (§6.8) written out here: s_e = sqrt(softplus(logit_e)),
  // w_i = s_{id_i} / max(sum_i s_{id_i}, 2^-14) * scale, for ids the caller forces.
  ThreadPool pool(1);
  auto be = compute::make_cpu_backend(&pool);
  const int64_t E = 16, K = 4, rows = 2;
  std::vector<float> logits(rows * E);
  for (int64_t i = 0; i < rows * E; ++i) logits[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 3;
  std::vector<float> bias(E, 0.0f);
  bias[0] = 100;  // would win the top-k: the forced ids must ignore selection entirely
  const std::vector<int32_t> forced = {5, 1, 14, 9, 2, 3, 15, 0};
  compute::Buffer<float> lg(*be, logits.size()), w(*be, rows * K);
  compute::Buffer<int32_t> ids(*be, forced.size()), ex(*be, rows * K);
  lg.from_host(logits);
  ids.from_host(forced);
  compute::RouteParams p{E, K, bias.data(), nullptr, true, 1.5f};
  p.forced = ids.data();
  be->moe_route(lg.data(), nullptr, rows, p, ex.data(), w.data());
  EXPECT_EQ(ex.to_host(), forced);
  const auto got = w.to_host();
  for (int64_t t = 0; t < rows; ++t) {
    float s[K], sum = 0;
    for (int64_t i = 0; i < K; ++i) {
      const float x = logits[static_cast<size_t>(t * E + forced[static_cast<size_t>(t * K + i)])];
      s[i] = std::sqrt(x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x)))));
      sum += s[i];
    }
    for (int64_t i = 0; i < K; ++i)
      EXPECT_NEAR(got[static_cast<size_t>(t * K + i)], s[i] / std::max(sum, 6.103515625e-5f) * 1.5f, 1e-6) << t << i;
  }
  const std::vector<int32_t> bad = {5, 1, 16, 9, 2, 3, 15, 0};
  ids.from_host(bad);
  EXPECT_THROW(be->moe_route(lg.data(), nullptr, rows, p, ex.data(), w.data()), Error);
}

TEST(BenchRouting, StreamingIsBitIdenticalToResident) {
  const std::string p = test::tmp_file("br_demo.gguf");
  fs::copy_file(kDemo, p, fs::copy_options::overwrite_existing);
  fs::remove(p + ".experts");
  const auto router = demo_router(11);
  const Logits resident = run(p, nullptr, &router, 20, 6);
  // Budgets that force misses (the demo's 6 layers x 2 experts = one token's 12), with and
  // without prefetch (the lookahead then guesses from the same source).
  for (auto [slots, prefetch] : {std::pair<int64_t, bool>{12, false}, {12, true}, {30, true}}) {
    auto xp = provider(p, slots, prefetch);
    const Logits streamed = run(p, xp.get(), &router, 20, 6);
    EXPECT_TRUE(same(resident.prefill, streamed.prefill)) << slots << " " << prefetch;
    EXPECT_TRUE(same(resident.decode, streamed.decode)) << slots << " " << prefetch;
    EXPECT_GT(xp->stats().misses, 6u * 6);
  }
  // Repeated: same seed, same logits; another seed routes otherwise, and so does the model's own router.
  const auto again = demo_router(11), other = demo_router(12);
  EXPECT_TRUE(same(resident.prefill, run(p, nullptr, &again, 20, 6).prefill));
  EXPECT_FALSE(same(resident.prefill, run(p, nullptr, &other, 20, 6).prefill));
  EXPECT_FALSE(same(resident.prefill, run(p, nullptr, nullptr, 20, 6).prefill));
}

TEST(BenchRouting, LearnedLayersTakeTheSourceIdsHashLayersKeepTheirs) {
  const std::string p = test::tmp_file("br_trace.gguf");
  fs::copy_file(kDemo, p, fs::copy_options::overwrite_existing);
  fs::remove(p + ".experts");
  const auto router = demo_router(3);
  const std::string with = test::tmp_file("br_with.trace"), without = test::tmp_file("br_without.trace");
  {
    auto xp = provider(p, 0, true, with);
    run(p, xp.get(), &router, 12, 4);
  }
  {
    auto xp = provider(p, 0, true, without);
    run(p, xp.get(), nullptr, 12, 4);
  }
  const stream::Trace a = stream::read_trace(with), b = stream::read_trace(without);
  ASSERT_GT(a.header.n_hash_layers, 0);
  ASSERT_LT(a.header.n_hash_layers, a.header.n_layer);
  auto demand = [](const stream::Trace& t) {
    std::vector<stream::TraceRecord> v;
    for (const auto& r : t.records)
      if (!r.hint) v.push_back(r);
    return v;
  };
  const auto da = demand(a), db = demand(b);
  ASSERT_EQ(da.size(), static_cast<size_t>(16 * a.header.n_layer));
  ASSERT_EQ(da.size(), db.size());
  int learned_differ = 0, hints = 0;
  for (size_t i = 0; i < da.size(); ++i) {
    if (da[i].layer < a.header.n_hash_layers) {
      // Same prompt tokens, same tid2eid rows (the greedy continuations differ, so their tokens too).
      if (da[i].pos < 12) EXPECT_EQ(da[i].experts, db[i].experts) << "hash layer " << da[i].layer << " at " << da[i].pos;
    } else {
      EXPECT_EQ(da[i].experts, router.route(da[i].pos, da[i].layer)) << da[i].layer << " at " << da[i].pos;
      learned_differ += da[i].experts != db[i].experts;
    }
  }
  EXPECT_GT(learned_differ, 0);
  for (const auto& r : a.records)
    if (r.hint) {
      EXPECT_EQ(r.experts, router.guess(r.pos, r.layer, a.header.k)) << r.layer << " at " << r.pos;
      ++hints;
    }
  EXPECT_GT(hints, 0);  // decode steps (one token) made lookahead guesses
}

TEST(BenchRouting, EngineOption) {
  EngineOptions eo;
  eo.model_path = kDemo;
  eo.threads = 2;
  auto off = Engine::open(eo);
  eo.bench_routing = "zipf:5";
  auto on = Engine::open(eo);
  // Another model as far as payloads know; the plan says which routing ran.
  EXPECT_NE(on->info().model_id, off->info().model_id);
  EXPECT_NE(on->memory_plan().residency.find("bench routing      zipf:5"), std::string::npos)
      << on->memory_plan().residency;
  EXPECT_EQ(off->memory_plan().residency.find("bench routing"), std::string::npos);
  auto logits = [](const Engine& e) {
    auto s = e.new_session();
    s->sync(prompt(10, e.info().n_vocab));
    const auto l = s->logits();
    return std::vector<float>(l.begin(), l.end());
  };
  // The engine path gives the model path's logits (same source, same seed).
  const auto router = demo_router(5);
  const Logits direct = run(kDemo, nullptr, &router, 10, 0);
  const auto l_on = logits(*on);
  const int64_t V = on->info().n_vocab;
  ASSERT_EQ(l_on.size(), static_cast<size_t>(V));
  EXPECT_EQ(std::memcmp(l_on.data(), direct.prefill.data() + 9 * V, V * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(l_on.data(), logits(*off).data(), V * sizeof(float)), 0);
  eo.bench_routing = "zipf:x";
  EXPECT_THROW(Engine::open(eo), Error);
}
