// The device tier (stream/device_tier.h) at the provider level, on a machine without a GPU
// (sim_device_slots.h plays the device): every view is a device copy holding the file's exact
// bytes, the counters add up, no host slot is refilled under a copy in flight, every host
// buffer is page-locked and unlocked again; and the device plan's floor and fit rules.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "core/error.h"
#include "gguf/gguf.h"
#include "sim_device_slots.h"
#include "stream/planner.h"
#include "stream/provider.h"
#include "stream_fixture.h"

using namespace ds4;
using namespace ds4::stream;
using ds4::test::SimLog;
using ds4::test::SimSlots;

namespace {

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
      // The default (hot) policy admits: a full tier copies colder experts in as transient.
      EXPECT_TRUE(st.gpu_admission);
      if (dev_slots < ref.L.n_layer * E) {
        EXPECT_GT(st.gpu_transient, 0u);
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

// Admission (device_tier.h), on the tier itself: with the hot policy a full tier copies a
// colder expert in as transient (reusing a transient slot, or turning the coldest cached one into
// one when none exists) and lets a hotter one displace the coldest cached expert; with LRU
// every expert is admitted and the least recent goes.
TEST(StreamDeviceTier, HotTierAdmitsOnlyHotterExperts) {
  SimLog log;
  std::vector<uint8_t> host(4096, 7);
  auto run = [&](PolicyKind kind) {
    DeviceTier t(std::make_unique<SimSlots>(&log), 10, host.size(), 4, kind, 256, 2);
    uint64_t now = 0;
    auto use = [&](uint32_t id, int times) {
      for (int i = 0; i < times; ++i) t.touch(id, ++now);
      if (!t.resident(id)) t.install(id, host.data(), host.size(), t.begin_lease());
      t.unpin(id);
    };
    for (uint32_t id : {0u, 1u, 2u}) use(id, 4);
    use(3, 1);  // the fourth slot was free: cached
    for (uint32_t id : {0u, 1u, 2u, 3u}) EXPECT_TRUE(t.cached(id)) << id;
    use(5, 1);  // as cold as 3: not admitted; no transient slot yet, so 3's becomes one
    use(6, 1);  // colder than 0-2: takes 5's transient slot
    use(7, 6);  // hotter than any: displaces the coldest cached (0, 1, 2 tie: 0 least recent)
    return std::vector<bool>{t.resident(0), t.cached(1), t.cached(2), t.resident(3), t.resident(5),
                             t.resident(6) && !t.cached(6), t.cached(7), t.transient_installs() == 2, t.admission()};
  };
  EXPECT_EQ(run(PolicyKind::Hot), (std::vector<bool>{false, true, true, false, false, true, true, true, true}));
  // LRU: 5 evicts 0, 6 evicts 1, 7 evicts 2; 3 (used after 0-2) stays; nothing transient.
  DeviceTier lru(std::make_unique<SimSlots>(&log), 10, host.size(), 4, PolicyKind::Lru, 256, 2);
  uint64_t now = 0;
  for (uint32_t id : {0u, 1u, 2u, 3u, 5u, 6u, 7u}) {
    lru.touch(id, ++now);
    lru.install(id, host.data(), host.size(), lru.begin_lease());
    lru.unpin(id);
  }
  for (uint32_t id : {3u, 5u, 6u, 7u}) EXPECT_TRUE(lru.cached(id)) << id;
  for (uint32_t id : {0u, 1u, 2u}) EXPECT_FALSE(lru.resident(id)) << id;
  EXPECT_FALSE(lru.admission());
  EXPECT_EQ(lru.transient_installs(), 0u);
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

}  // namespace
