// Expert host compute (ProviderOptions::host_compute, model/common/streamed_experts.cpp) on a
// machine without a GPU: the session's CPU backend plays the device (with the device tier over
// host memory, sim_device_slots.h, or none), a second CPU backend instance is the host backend
// that computes the experts handed out as host views. Logits and the greedy continuation must
// be the same bits as resident mode and as copy mode, at budgets that force misses in both
// tiers; the counters must show that experts really went the host way, and a host backend that
// computes differently (float activations) must change the logits, which proves the host
// experts ran on it and not on the session backend.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "sim_device_slots.h"
#include "stream/provider.h"
#include "stream_fixture.h"
#include "stream_run.h"

using namespace ds4;
using namespace ds4::stream;
using ds4::test::SimLog;
using ds4::test::SimSlots;
namespace fs = std::filesystem;

namespace {

using test::same_bits;
using Run = test::StreamRun;

// A prefill in chunks (several tokens per expert: the gathered-rows path) and a greedy
// continuation (one token: the single-row path).
Run run(const std::string& path, ExpertProvider* xp, compute::Backend* host, const std::vector<int32_t>& toks,
        int steps) {
  model::deepseek4::Options o;
  o.experts = xp;
  o.expert_host_backend = host;
  o.max_batch = 16;
  return test::run_deepseek4(path, o, toks, steps);
}

struct Fixture {
  std::string path;
  std::vector<int32_t> toks;
  int64_t n_layer = 0, n_expert = 0, K = 1;
};

Fixture fixture(const std::string& name, const std::string& src, int64_t n_tokens) {
  Fixture fx;
  fx.path = test::tmp_file(name + ".gguf");
  fs::copy_file(src, fx.path, fs::copy_options::overwrite_existing);
  fs::remove(fx.path + ".experts");
  gguf::File f = gguf::File::open(fx.path);
  const ExpertLayout L = ExpertLayout::from_gguf(f);
  fx.n_layer = L.n_layer, fx.n_expert = L.n_expert;
  fx.K = std::max<int64_t>(1, experts_used_per_token(f));
  std::mt19937 rng(11);
  fx.toks.resize(static_cast<size_t>(n_tokens));
  for (auto& t : fx.toks) t = static_cast<int32_t>(rng() % f.find_tensor("token_embd.weight")->ne[1]);
  return fx;
}

// max_rows: ProviderOptions::host_compute_max_rows; the default here is every expert on the host.
std::unique_ptr<ExpertProvider> provider(const Fixture& fx, int64_t host_slots, bool host_compute,
                                         int64_t max_rows = INT64_MAX) {
  ProviderOptions o;
  o.budget_slots = host_slots;
  o.io = IoKind::Pread;
  o.store.packed_path = "-";
  o.host_compute = host_compute;
  o.host_compute_max_rows = max_rows;
  return ExpertProvider::open(gguf::File::open(fx.path), o);
}

void check_model(const std::string& name, const std::string& src, int64_t n_tokens, int steps) {
  const Fixture fx = fixture(name, src, n_tokens);
  const Run resident = run(fx.path, nullptr, nullptr, fx.toks, steps);
  ThreadPool host_pool(2);
  auto host = compute::make_cpu_backend(&host_pool);
  const int64_t floor = fx.n_layer * fx.K;

  // No device tier: every expert is a host view, all of them computed by the host backend.
  for (const int64_t h : {floor, floor + 3}) {
    auto xp = provider(fx, h, true);
    const Run r = run(fx.path, xp.get(), host.get(), fx.toks, steps);
    const std::string what = fmt::format("{}: host compute, no device tier, host {} slots", name, h);
    EXPECT_TRUE(same_bits(resident, r)) << what;
    const ProviderStats st = xp->stats();
    EXPECT_GT(st.misses, 0u) << what;
    EXPECT_EQ(st.host_computed, st.hits + st.inflight_hits + st.misses) << what << ": every selection on the host";
    EXPECT_GT(st.host_computed_bytes, 0u) << what;
    EXPECT_NE(st.describe().find("host compute:"), std::string::npos) << st.describe();
  }

  // A device tier (simulated) above the host cache: copy mode against host compute, same budgets.
  struct Budget {
    int64_t host, dev;
  };
  for (const Budget b : {Budget{floor, fx.K}, Budget{floor + 3, 3 * fx.K}}) {
    Run by_mode[2];
    for (const bool hc : {false, true}) {
      SimLog log;
      auto xp = provider(fx, b.host, hc);
      xp->attach_device(std::make_unique<SimSlots>(&log), b.dev);
      by_mode[hc] = run(fx.path, xp.get(), hc ? host.get() : nullptr, fx.toks, steps);
      const std::string what =
          fmt::format("{}: {}, host {} slots, gpu {} slots", name, hc ? "host compute" : "copy", b.host, b.dev);
      EXPECT_TRUE(same_bits(resident, by_mode[hc])) << what << ": against resident";
      const ProviderStats st = xp->stats();
      std::fprintf(stderr, "[host-compute] %s: gpu %llu hits %llu misses %llu evictions, %llu copies; %llu host-computed\n",
                   what.c_str(), static_cast<unsigned long long>(st.gpu_hits),
                   static_cast<unsigned long long>(st.gpu_misses), static_cast<unsigned long long>(st.gpu_evictions),
                   static_cast<unsigned long long>(st.h2d_copies), static_cast<unsigned long long>(st.host_computed));
      EXPECT_GT(st.misses, 0u) << what;
      EXPECT_GT(st.gpu_misses, 0u) << what;
      if (hc) {
        // The tier fills its free slots once and is never evicted; the rest runs on the host.
        EXPECT_GT(st.host_computed, 0u) << what;
        EXPECT_EQ(st.gpu_evictions, 0u) << what;
        EXPECT_LE(st.h2d_copies, static_cast<uint64_t>(b.dev)) << what;
        EXPECT_EQ(st.h2d_copies + st.host_computed, st.gpu_misses) << what << ": each miss copied or host-computed";
        EXPECT_GT(st.gpu_hits, 0u) << what << ": the slots filled while free are hit later";
      } else {
        EXPECT_EQ(st.host_computed, 0u) << what;
        EXPECT_EQ(st.h2d_copies, st.gpu_misses) << what;
      }
      xp->detach_device();
      EXPECT_EQ(log.violations, 0u) << what;
      EXPECT_EQ(log.pinned_now, 0) << what;
    }
    EXPECT_TRUE(same_bits(by_mode[0], by_mode[1])) << name << ": copy against host compute";
  }

  // Experts of more than one row (the prefill's) copied, evicting from the full tier; the
  // decode's one-row experts computed on the host: both ways in one run.
  {
    SimLog log;
    auto xp = provider(fx, floor, true, 1);
    xp->attach_device(std::make_unique<SimSlots>(&log), fx.K);
    const Run r = run(fx.path, xp.get(), host.get(), fx.toks, steps);
    const std::string what = fmt::format("{}: host compute of one-row experts only", name);
    EXPECT_TRUE(same_bits(resident, r)) << what;
    const ProviderStats st = xp->stats();
    EXPECT_GT(st.host_computed, 0u) << what;
    EXPECT_GT(st.h2d_copies, static_cast<uint64_t>(fx.K)) << what << ": copies beyond the free slots";
    EXPECT_GT(st.gpu_evictions, 0u) << what;
    EXPECT_EQ(st.h2d_copies + st.host_computed, st.gpu_misses) << what;
    xp->detach_device();
    EXPECT_EQ(log.violations, 0u) << what;
  }

  // The canary: a host backend that multiplies against f32 activations computes other values,
  // so if the logits did not change the host experts did not run on the host backend.
  compute::CpuOptions fo;
  fo.float_activations = true;
  auto other = compute::make_cpu_backend(&host_pool, fo);
  SimLog log;
  auto xp = provider(fx, floor, true);
  xp->attach_device(std::make_unique<SimSlots>(&log), fx.K);
  const Run r = run(fx.path, xp.get(), other.get(), fx.toks, steps);
  EXPECT_NE(std::memcmp(resident.prefill.data(), r.prefill.data(), resident.prefill.size() * 4), 0)
      << name << ": a different host backend left the logits unchanged";
  xp->detach_device();
}

TEST(StreamHostCompute, DemoModelBitIdentical) {
  check_model("hc_demo", DS4_SOURCE_DIR "/models/ds4-demo.gguf", 40, 8);
}

TEST(StreamHostCompute, QuantSmallFlashQ2BitIdentical) {
  check_model("hc_quant_small", DS4_FIXTURES_DIR "/deepseek4/quant_small/model-flash-q2.gguf", 40, 6);
}

TEST(StreamHostCompute, EngineChecksTheFlagAndIgnoresItOnTheCpu) {
  EngineOptions eo;
  eo.model_path = DS4_SOURCE_DIR "/models/ds4-demo.gguf";
  eo.threads = 2;
  eo.ssd_streaming = true;
  // Engine::open must refuse eo with an error that names `flag`.
  auto expect_refused = [&](const std::string& flag, const std::string& value) {
    try {
      Engine::open(eo);
      ADD_FAILURE() << flag << " " << value << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  eo.expert_host_compute = "gpu";
  expect_refused("--expert-host-compute", "gpu");
  eo.expert_host_compute = "auto";
  eo.expert_host_compute_rates = "30";
  expect_refused("--expert-host-compute-rates", "30");
  // The CPU backend computes every expert where it sits: the option changes nothing there.
  eo.expert_host_compute = "cpu";
  eo.expert_host_compute_rates = "";
  auto engine = Engine::open(eo);
  EXPECT_EQ(engine->memory_plan().describe().find("expert compute"), std::string::npos)
      << engine->memory_plan().describe();
  ASSERT_TRUE(engine->expert_counters());
  EXPECT_EQ(engine->expert_counters()->host_computed_bytes, 0u);
}

}  // namespace
