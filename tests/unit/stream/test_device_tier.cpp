// The device tier (stream/device_tier.h) on a machine without a GPU: SimSlots plays the device
// over host memory, with copies whose completion lags behind (fences pass late unless waited
// for) and a check, when each copy's fence passes, that its host source was not changed in the
// meantime (a host slot refilled while a copy from it was in flight) and that the source was
// page-locked. Checked: every view is a device copy holding the file's exact bytes; the
// counters add up; the model's logits and greedy continuation are bit-identical to resident
// mode at budgets that force misses in both tiers; the plan's floor and fit rules; the
// engine's refusals.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "stream/device_tier.h"
#include "stream/planner.h"
#include "stream/provider.h"
#include "stream_fixture.h"

using namespace ds4;
using namespace ds4::stream;
namespace fs = std::filesystem;

namespace {

struct SimLog {
  uint64_t uploads = 0, violations = 0, unpinned_sources = 0, late_polls = 0;
  int64_t pinned_now = 0, pins_ever = 0;
  std::vector<std::pair<const uint8_t*, uint64_t>> arenas;  // what alloc handed out
  bool in_arena(const uint8_t* p, uint64_t n) const {
    for (auto [a, b] : arenas)
      if (p >= a && p + n <= a + b) return true;
    return false;
  }
};

class SimSlots final : public DeviceSlots {
 public:
  explicit SimSlots(SimLog* log) : log_(log) {}
  uint8_t* alloc(uint64_t bytes) override {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
    std::memset(p, 0xA5, bytes);  // never the file's bytes by accident
    log_->arenas.emplace_back(p, bytes);
    return p;
  }
  void release(uint8_t* p) override { std::free(p); }
  bool pin_host(void* p, uint64_t bytes) override {
    pinned_[static_cast<uint8_t*>(p)] = bytes;
    ++log_->pinned_now, ++log_->pins_ever;
    return true;
  }
  void unpin_host(void* p) override {
    EXPECT_EQ(pinned_.erase(static_cast<uint8_t*>(p)), 1u) << "unpin of a buffer never pinned";
    --log_->pinned_now;
  }
  void upload(uint8_t* dst, const uint8_t* src, uint64_t bytes) override {
    bool pinned = false;
    for (auto& [p, n] : pinned_)
      if (src >= p && src + bytes <= p + n) pinned = true;
    if (!pinned) ++log_->unpinned_sources;
    std::memcpy(dst, src, bytes);  // the CPU ops read it right away; the check below is the point
    inflight_.push_back({made_ + 1, src, bytes, XXH64(src, bytes, 0)});
    ++log_->uploads;
  }
  uint64_t fence() override { return ++made_; }
  bool done(uint64_t f, bool wait) override {
    // Without wait, a fence passes only on every third poll, one at a time: copies stay in
    // flight across acquires, so host slots stay held and the provider must cope.
    if (wait) pass(f);
    else if (++polls_ % 3 == 0) pass(std::min(f, passed_ + 1));
    else ++log_->late_polls;
    return f <= passed_;
  }
  uint64_t free_bytes() override { return 1ull << 40; }
  ~SimSlots() override { pass(made_); }

 private:
  struct Copy {
    uint64_t fence;
    const uint8_t* src;
    uint64_t bytes, hash;
  };
  void pass(uint64_t f) {
    passed_ = std::max(passed_, std::min(f, made_));
    while (!inflight_.empty() && inflight_.front().fence <= passed_) {
      const Copy& c = inflight_.front();
      if (XXH64(c.src, c.bytes, 0) != c.hash) ++log_->violations;  // the host slot changed under the copy
      inflight_.erase(inflight_.begin());
    }
  }
  SimLog* log_;
  std::map<uint8_t*, uint64_t> pinned_;
  std::vector<Copy> inflight_;
  uint64_t made_ = 0, passed_ = 0, polls_ = 0;
};

struct Ref {
  gguf::File g;
  ExpertLayout L;
  explicit Ref(const std::string& p) : g(gguf::File::open(p)), L(ExpertLayout::from_gguf(g)) {}
  void expect_view(const WeightView& v, int64_t il, int64_t e, int c) const {
    const auto& cs = L.layers[static_cast<size_t>(il)].comp[static_cast<size_t>(c)];
    const auto* t = g.find_tensor(expert_tensor_name(il, c));
    ASSERT_EQ(std::memcmp(v.data, t->data + e * cs.bytes, cs.bytes), 0) << "layer " << il << " expert " << e;
  }
};

TEST(StreamDeviceTier, ViewsAreDeviceCopiesOfTheFileBytes) {
  auto p = test::write_stream_model("dev_views", test::stream_config());
  Ref ref(p);
  const int64_t E = ref.L.n_expert, K = 2;
  for (int64_t host_slots : {3, 0}) {
    for (int64_t dev_slots : {2, 5, 1000}) {
      ProviderOptions o;
      o.budget_slots = host_slots;
      o.io = IoKind::Pread;
      SimLog log;
      auto prov = ExpertProvider::open(ref.g, o);
      prov->attach_device(std::make_unique<SimSlots>(&log), dev_slots);
      std::mt19937 rng(static_cast<uint32_t>(host_slots * 31 + dev_slots));
      uint64_t selections = 0;
      for (int step = 0; step < 16; ++step) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 3);
        std::vector<int32_t> toks(static_cast<size_t>(n), 1);
        prov->begin_tokens(toks);
        for (int64_t il = 0; il < ref.L.n_layer; ++il) {
          std::vector<int32_t> routing;
          for (int64_t t = 0; t < n; ++t) {
            const int32_t a = static_cast<int32_t>(rng() % (E / 2)), b = static_cast<int32_t>(E / 2 + rng() % (E / 2));
            routing.push_back(a), routing.push_back(b);
          }
          std::set<int32_t> uniq(routing.begin(), routing.end()), seen;
          selections += uniq.size();
          ExpertLease lease = prov->acquire(il, routing, K);
          while (const auto* x = lease.next()) {
            EXPECT_TRUE(seen.insert(x->id).second);
            for (const auto* v : {&x->gate, &x->up, &x->down}) EXPECT_TRUE(log.in_arena(v->data, 1)) << "a host view";
            ref.expect_view(x->gate, il, x->id, kGate);
            ref.expect_view(x->up, il, x->id, kUp);
            ref.expect_view(x->down, il, x->id, kDown);
          }
          EXPECT_EQ(seen, uniq);
        }
      }
      const ProviderStats st = prov->stats();
      EXPECT_EQ(st.gpu_hits + st.gpu_misses, selections);
      EXPECT_EQ(st.hits + st.inflight_hits + st.misses, st.gpu_misses);  // the host tier sees the gpu tier's misses
      EXPECT_EQ(st.h2d_copies, st.gpu_misses);
      EXPECT_EQ(st.gpu_slots, dev_slots);
      EXPECT_LE(st.gpu_used, st.gpu_slots);
      EXPECT_GT(st.gpu_misses, 0u);
      if (dev_slots < ref.L.n_layer * E) {
        EXPECT_GT(st.gpu_evictions, 0u);
      } else {
        EXPECT_EQ(st.gpu_evictions, 0u);
      }
      if (dev_slots >= 5) {
        EXPECT_GT(st.gpu_hits, 0u);
      }
      EXPECT_GT(log.late_polls, 0u);
      EXPECT_EQ(log.unpinned_sources, 0u);
      EXPECT_NE(prov->stats().describe().find("gpu tier:"), std::string::npos);
      prov->detach_device();
      EXPECT_EQ(log.violations, 0u) << "a host slot was refilled while a copy from it was in flight";
      EXPECT_EQ(log.pinned_now, 0) << "host buffers left page-locked";
      EXPECT_GT(log.pins_ever, 0);
    }
  }
}

// Logits of a prefill (in chunks: several tokens per expert) and a greedy continuation.
struct Run {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
};

Run run(const std::string& path, ExpertProvider* xp, const std::vector<int32_t>& toks, int steps) {
  model::deepseek4::Options o;
  o.experts = xp;
  o.max_batch = 16;
  auto m = model::deepseek4::Model::from_file(gguf::File::open(path), o);
  ThreadPool pool(2);
  auto be = compute::make_cpu_backend(&pool);
  m->register_weights(*be);
  const int64_t V = m->hparams().n_vocab;
  Run r;
  r.prefill.resize(toks.size() * static_cast<size_t>(V));
  auto st = m->new_state(*be, static_cast<int64_t>(toks.size()) + steps + 1);
  m->eval(*be, st, toks, r.prefill.data());
  auto argmax = [&](const float* v) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; ++i)
      if (v[i] > v[b]) b = i;
    return static_cast<int32_t>(b);
  };
  int32_t next = argmax(r.prefill.data() + (toks.size() - 1) * V);
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    std::vector<float> lg(static_cast<size_t>(V));
    m->eval(*be, st, std::span(&next, 1), lg.data());
    r.decode.insert(r.decode.end(), lg.begin(), lg.end());
    next = argmax(lg.data());
  }
  return r;
}

void check_model(const std::string& name, const std::string& src, int64_t n_tokens, int steps) {
  const std::string p = test::tmp_file(name + ".gguf");
  fs::copy_file(src, p, fs::copy_options::overwrite_existing);
  fs::remove(p + ".experts");
  gguf::File f = gguf::File::open(p);
  const ExpertLayout L = ExpertLayout::from_gguf(f);
  const int64_t K = std::max<int64_t>(1, experts_used_per_token(f));
  std::mt19937 rng(5);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens));
  for (auto& t : toks) t = static_cast<int32_t>(rng() % f.find_tensor("token_embd.weight")->ne[1]);
  const Run resident = run(p, nullptr, toks, steps);
  struct Budget {
    int64_t host, dev;
  };
  // The host floor (a token's experts) and a little more; the device floor (one layer's), more,
  // and every expert (hits certain).
  for (const Budget b : {Budget{L.n_layer * K, K}, Budget{L.n_layer * K + 3, 3 * K}, Budget{0, L.n_layer * L.n_expert}}) {
    ProviderOptions o;
    o.budget_slots = b.host;
    o.io = IoKind::Pread;
    o.store.packed_path = "-";
    SimLog log;
    auto xp = ExpertProvider::open(f, o);
    xp->attach_device(std::make_unique<SimSlots>(&log), b.dev);
    const Run streamed = run(p, xp.get(), toks, steps);
    const std::string what = fmt::format("{}: host {} slots, gpu {} slots", name, b.host, b.dev);
    ASSERT_EQ(resident.prefill.size(), streamed.prefill.size());
    EXPECT_EQ(std::memcmp(resident.prefill.data(), streamed.prefill.data(), resident.prefill.size() * 4), 0)
        << what << ": prefill logits";
    EXPECT_EQ(resident.greedy, streamed.greedy) << what;
    EXPECT_EQ(std::memcmp(resident.decode.data(), streamed.decode.data(), resident.decode.size() * 4), 0)
        << what << ": decode logits";
    const ProviderStats st = xp->stats();
    std::fprintf(stderr, "[device-tier] %s: gpu %llu hits %llu misses %llu evictions; host %llu hits %llu misses\n",
                 what.c_str(), static_cast<unsigned long long>(st.gpu_hits),
                 static_cast<unsigned long long>(st.gpu_misses), static_cast<unsigned long long>(st.gpu_evictions),
                 static_cast<unsigned long long>(st.hits + st.inflight_hits), static_cast<unsigned long long>(st.misses));
    EXPECT_GT(st.gpu_misses, 0u) << what;
    EXPECT_GT(st.misses, 0u) << what;
    if (b.dev == L.n_layer * L.n_expert) {
      EXPECT_GT(st.gpu_hits, 0u) << what;
      EXPECT_EQ(st.gpu_evictions, 0u) << what;
    }
    if (b.dev == K) {
      EXPECT_GT(st.gpu_evictions, 0u) << what;
    }
    xp->detach_device();
    EXPECT_EQ(log.violations, 0u) << what;
    EXPECT_EQ(log.unpinned_sources, 0u) << what;
    EXPECT_EQ(log.pinned_now, 0) << what;
  }
}

TEST(StreamDeviceTier, DemoModelBitIdentical) {
  check_model("dev_demo", DS4_SOURCE_DIR "/models/ds4-demo.gguf", 40, 8);
}

TEST(StreamDeviceTier, QuantSmallFlashQ2BitIdentical) {
  check_model("dev_quant_small", DS4_FIXTURES_DIR "/deepseek4/quant_small/model-flash-q2.gguf", 40, 6);
}

TEST(StreamDeviceTier, PlanFloorAndFit) {
  DeviceTierRequest r;
  r.free_bytes = 100ull << 20;
  r.session_bytes = 10ull << 20;
  r.scratch_bytes = 5ull << 20;
  r.reserve_bytes = 5ull << 20;
  r.slot_bytes = 7ull << 20;
  r.expert_count = 1000;
  r.experts_per_token = 6;
  DeviceTierPlan p = plan_device_tier(r);  // sized: (100 - 20) MiB / 7 MiB
  EXPECT_EQ(p.slots, 11);
  EXPECT_NE(p.describe.find("sized from"), std::string::npos) << p.describe;
  r.given = "8";
  r.budget_slots = 8;
  EXPECT_EQ(plan_device_tier(r).slots, 8);
  r.budget_slots = 5;  // below one layer's experts for one token
  r.given = "5";
  try {
    plan_device_tier(r);
    FAIL() << "5 slots accepted with 6 experts per token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one layer's experts"), std::string::npos) << e.what();
  }
  r.given = "1GB";
  r.budget_slots = 0;
  r.budget_bytes = 1000000000;  // does not fit 100 MiB
  EXPECT_THROW(plan_device_tier(r), Error);
  r.given = "";
  r.free_bytes = 60ull << 20;  // 40 MiB left: 5 slots < 6
  EXPECT_THROW(plan_device_tier(r), Error);
  r.free_bytes = 1ull << 40;  // capped at every expert
  EXPECT_EQ(plan_device_tier(r).slots, 1000);
}

TEST(StreamDeviceTier, EngineRefusesAGpuTierItCannotUse) {
  EngineOptions eo;
  eo.model_path = DS4_SOURCE_DIR "/models/ds4-demo.gguf";
  eo.threads = 2;
  eo.expert_cache_gpu = "4";
  try {
    Engine::open(eo);  // resident experts
    FAIL() << "--expert-cache-gpu accepted without streaming";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-cache-gpu"), std::string::npos) << e.what();
  }
  eo.ssd_streaming = true;
  try {
    Engine::open(eo);  // the CPU backend has no device memory
    FAIL() << "--expert-cache-gpu accepted on the CPU backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device backend"), std::string::npos) << e.what();
  }
}

}  // namespace
