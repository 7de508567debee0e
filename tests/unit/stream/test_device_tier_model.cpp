// The device tier (stream/device_tier.h) under the model, on a machine without a GPU
// (sim_device_slots.h plays the device): the logits and greedy continuation are bit-identical
// to resident mode at budgets that force misses in both tiers; the engine's refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

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

// Logits of a prefill (in chunks: several tokens per expert) and a greedy continuation.
using Run = test::StreamRun;

Run run(const std::string& path, ExpertProvider* xp, const std::vector<int32_t>& toks, int steps) {
  model::deepseek4::Options o;
  o.experts = xp;
  o.max_batch = 16;
  return test::run_deepseek4(path, o, toks, steps);
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
