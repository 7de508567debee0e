// Routed-expert streaming on the CUDA backend (the gpu tier, stream/device_tier.h), run on the
// GPU machine by scripts/device/stream_gpu.sh (skipped when no CUDA device is visible).
// Resident and streaming runs on the same backend must give the same logits bit for bit: a
// prefill in chunks (several tokens per expert) and a 32-token greedy continuation, at budgets
// that force misses in both tiers (the gpu tier at its floor, one layer's experts for one token,
// and a little above; the host tier at its floor, one token's experts), with the gpu tier's
// misses copied into it or computed on the CPU where they sit (host compute, a CPU backend
// beside the CUDA one). Environment:
//   DS4_DEMO       models/ds4-demo.gguf (skipped when unset)
//   DS4_STREAM_FLASH  a Flash-geometry file (`ds4-gguf synth --preset flash-q2 --layers N`: 256
//                  experts of 6.75 MiB, IQ2_XXS/Q2_K), else DS4_CUDA_WORK/flash3.q2.gguf as
//                  cuda_suite.sh writes it (skipped when neither exists)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "compute/backends.h"
#include "compute/cuda/cuda_backend.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "stream/device_tier.h"
#include "stream/layout.h"
#include "stream/provider.h"
#include "stream/synthetic_routing.h"

namespace fs = std::filesystem;
using namespace ds4;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

std::string model_file(const char* which) {
  if (std::string(which) == "demo") return env("DS4_DEMO");
  if (!env("DS4_STREAM_FLASH").empty()) return env("DS4_STREAM_FLASH");
  const std::string w = env("DS4_CUDA_WORK");
  return w.empty() ? "" : (fs::path(w) / "flash3.q2.gguf").string();
}

int32_t argmax(const float* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return static_cast<int32_t>(b);
}

struct Run {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
  stream::ProviderStats stats;
};

// One run on a fresh backend (CUDA unless `backend` says otherwise); host_slots < 0: resident.
// The provider outlives the model and lets go of its gpu tier before the backend goes.
// `router`: benchmark routing (stream/synthetic_routing.h). `steps_out`: the CUDA backend's
// step-graph counts after the run. `host_compute`: the gpu tier's misses run on a CPU backend.
Run run(const std::string& path, const std::vector<int32_t>& toks, int steps, int64_t host_slots, int64_t gpu_slots,
        stream::PolicyKind policy, const stream::ZipfRouter* router = nullptr, const char* backend = "cuda",
        std::string* steps_out = nullptr, bool host_compute = false) {
  compute::BackendOptions bo;
  bo.name = backend;
  bo.verbose = false;
  auto be = compute::make_backend(bo);
  ThreadPool pool(4);
  std::unique_ptr<compute::Backend> host;
  if (host_compute) host = compute::make_cpu_backend(&pool);
  std::unique_ptr<stream::ExpertProvider> xp;
  if (host_slots >= 0) {
    stream::ProviderOptions o;
    o.budget_slots = host_slots;
    o.policy = policy;
    o.store.packed_path = "-";
    o.host_compute = host_compute;
    o.host_compute_max_rows = INT64_MAX;  // the prefill's experts too: the host path for many rows
    xp = stream::ExpertProvider::open(gguf::File::open(path), o);
  }
  model::deepseek4::Options mo;
  mo.experts = xp.get();
  mo.expert_host_backend = host.get();
  mo.bench_routing = router;
  mo.max_batch = 16;
  auto m = model::deepseek4::Model::from_file(gguf::File::open(path), mo);
  m->register_weights(*be);
  if (xp) xp->attach_device(stream::backend_device_slots(*be), gpu_slots);
  const int64_t V = m->hparams().n_vocab;
  Run r;
  r.prefill.resize(toks.size() * static_cast<size_t>(V));
  {
    auto st = m->new_state(*be, static_cast<int64_t>(toks.size()) + steps + 1);
    m->eval(*be, st, toks, r.prefill.data());
    int32_t next = argmax(r.prefill.data() + (toks.size() - 1) * V, V);
    for (int s = 0; s < steps; ++s) {
      r.greedy.push_back(next);
      // No logits_all: a one-token step whose last logits land in the state is what the decode
      // loop runs, and the only one the CUDA backend records and replays as a graph.
      m->eval(*be, st, std::span(&next, 1), nullptr);
      const std::vector<float>& lg = st.logits;
      r.decode.insert(r.decode.end(), lg.begin(), lg.end());
      next = argmax(lg.data(), V);
    }
  }
  if (xp) {
    r.stats = xp->stats();
    xp->detach_device();
  }
  if (steps_out) *steps_out = compute::cuda_step_stats(*be);
  return r;
}

int64_t replays(const std::string& step_stats) {  // "step graphs: N recorded, M replays"
  const auto at = step_stats.find(" recorded, ");
  return at == std::string::npos ? -1 : std::atoll(step_stats.c_str() + at + 11);
}

// n_tokens ids below the embedding's row count, from a seeded generator.
std::vector<int32_t> random_tokens(const gguf::File& f, int64_t n_tokens, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> toks(static_cast<size_t>(n_tokens));
  for (auto& t : toks) t = static_cast<int32_t>(rng() % f.find_tensor("token_embd.weight")->ne[1]);
  return toks;
}

// Streamed logits and greedy tokens equal the resident run's, byte for byte.
void expect_bit_identical(const Run& resident, const Run& s, const std::string& what) {
  ASSERT_EQ(resident.prefill.size(), s.prefill.size()) << what;
  EXPECT_EQ(std::memcmp(resident.prefill.data(), s.prefill.data(), s.prefill.size() * 4), 0) << what << ": prefill";
  EXPECT_EQ(resident.greedy, s.greedy) << what << ": greedy continuation";
  ASSERT_EQ(resident.decode.size(), s.decode.size()) << what;
  EXPECT_EQ(std::memcmp(resident.decode.data(), s.decode.data(), s.decode.size() * 4), 0) << what << ": decode";
}

void check(const char* which, int64_t n_tokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string path = model_file(which);
  if (path.empty() || !fs::exists(path)) GTEST_SKIP() << which << " model not given (DS4_DEMO / DS4_CUDA_WORK)";
  gguf::File f = gguf::File::open(path);
  const stream::ExpertLayout L = stream::ExpertLayout::from_gguf(f);
  const int64_t K = std::max<int64_t>(1, stream::experts_used_per_token(f));
  const std::vector<int32_t> toks = random_tokens(f, n_tokens, 11);
  const int steps = 32;
  const Run resident = run(path, toks, steps, -1, 0, stream::PolicyKind::Hot);
  struct Budget {
    int64_t host, gpu;
    stream::PolicyKind policy;
  };
  const int64_t floor_host = L.n_layer * K;
  for (const Budget b : {Budget{floor_host, K, stream::PolicyKind::Hot}, Budget{floor_host + 2, 2 * K, stream::PolicyKind::Hot},
                         Budget{floor_host + 5, floor_host + K, stream::PolicyKind::Lru}}) {
    const Run s = run(path, toks, steps, b.host, b.gpu, b.policy);
    const std::string what =
        fmt::format("{}: host {} slots, gpu {} slots, {}", which, b.host, b.gpu, stream::policy_name(b.policy));
    expect_bit_identical(resident, s, what);
    if (::testing::Test::HasFatalFailure()) return;
    const auto& st = s.stats;
    std::fprintf(stderr, "[cuda-stream] %s\n%s", what.c_str(), st.describe().c_str());
    EXPECT_GT(st.gpu_misses, 0u) << what;
    EXPECT_GT(st.misses, 0u) << what;  // the host tier missed too
    EXPECT_GT(st.h2d_bytes, 0u) << what;
    EXPECT_EQ(st.host_unpinned, 0u) << what << ": host buffers the backend could not page-lock";
    if (b.gpu > K) {
      EXPECT_GT(st.gpu_hits, 0u) << what;
    }
  }
}

TEST(CudaStream, DemoModelBitIdentical) { check("demo", 40); }

// Host compute: the gpu tier fills its free slots, then its misses are computed by the CPU
// backend from the host cache (never evicting the tier); the CUDA backend computes the rest.
// Same bits as resident.
void check_host_compute(const char* which, int64_t n_tokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string path = model_file(which);
  if (path.empty() || !fs::exists(path)) GTEST_SKIP() << which << " model not given (DS4_DEMO / DS4_CUDA_WORK)";
  gguf::File f = gguf::File::open(path);
  const stream::ExpertLayout L = stream::ExpertLayout::from_gguf(f);
  const int64_t K = std::max<int64_t>(1, stream::experts_used_per_token(f));
  const std::vector<int32_t> toks = random_tokens(f, n_tokens, 13);
  const int steps = 32;
  const Run resident = run(path, toks, steps, -1, 0, stream::PolicyKind::Hot);
  const int64_t floor_host = L.n_layer * K;
  for (const int64_t gpu : {K, 2 * K}) {
    const Run s = run(path, toks, steps, floor_host + 2, gpu, stream::PolicyKind::Hot, nullptr, "cuda", nullptr, true);
    const std::string what = fmt::format("{}: host compute, host {} slots, gpu {} slots", which, floor_host + 2, gpu);
    expect_bit_identical(resident, s, what);
    if (::testing::Test::HasFatalFailure()) return;
    const auto& st = s.stats;
    std::fprintf(stderr, "[cuda-stream] %s\n%s", what.c_str(), st.describe().c_str());
    EXPECT_GT(st.host_computed, 0u) << what;
    EXPECT_GT(st.misses, 0u) << what;
    EXPECT_EQ(st.gpu_evictions, 0u) << what;
    EXPECT_LE(st.h2d_copies, static_cast<uint64_t>(gpu)) << what << ": only free slots are filled";
    EXPECT_EQ(st.h2d_copies + st.host_computed, st.gpu_misses) << what;
  }
}

TEST(CudaStream, HostComputeDemoBitIdentical) { check_host_compute("demo", 40); }
TEST(CudaStream, HostComputeFlashGeometryBitIdentical) { check_host_compute("flash3", 24); }

// Benchmark routing (--bench-routing) on the device: the decode steps replayed as CUDA graphs
// read each step's forced ids from the step inputs, so (1) the CUDA backend's logits equal the
// CPU backend's under the same seed at every step (a graph replaying stale ids would fork at the
// first replayed step), (2) streaming through the gpu tier equals resident, and (3) the routing
// really changed (the model's own routing gives other logits).
TEST(CudaStream, BenchRoutingReplaysWithTheStepsIds) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string path = model_file("demo");
  if (path.empty() || !fs::exists(path)) GTEST_SKIP() << "DS4_DEMO not given";
  gguf::File f = gguf::File::open(path);
  const auto hp = model::deepseek4::HParams::from_gguf(f);
  stream::ZipfRoutingParams zp;
  zp.n_layer = hp.n_layer, zp.n_expert = hp.n_expert, zp.k = hp.n_expert_used, zp.seed = 7;
  const stream::ZipfRouter router(zp);
  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back(5 + 11 * i % 700);
  const int steps = 32;
  std::string gs;
  const auto cuda = run(path, toks, steps, -1, 0, stream::PolicyKind::Hot, &router, "cuda", &gs);
  std::fprintf(stderr, "[cuda-stream] bench routing, resident: %s\n", gs.c_str());
  if (env("DS4_CUDA_GRAPHS") != "0") {
    EXPECT_GT(replays(gs), 8) << gs;  // most decode steps were graph replays
  }
  const auto cpu = run(path, toks, steps, -1, 0, stream::PolicyKind::Hot, &router, "cpu");
  ASSERT_EQ(cuda.prefill.size(), cpu.prefill.size());
  EXPECT_EQ(std::memcmp(cuda.prefill.data(), cpu.prefill.data(), cpu.prefill.size() * 4), 0) << "prefill vs cpu";
  EXPECT_EQ(cuda.greedy, cpu.greedy) << "greedy vs cpu";
  ASSERT_EQ(cuda.decode.size(), cpu.decode.size());
  const size_t V = static_cast<size_t>(hp.n_vocab);
  for (int s = 0; s < steps; ++s)
    EXPECT_EQ(std::memcmp(cuda.decode.data() + s * V, cpu.decode.data() + s * V, V * 4), 0) << "decode step " << s;
  const int64_t K = hp.n_expert_used;
  const auto streamed = run(path, toks, steps, hp.n_layer * K + 2, 2 * K, stream::PolicyKind::Lru, &router);
  EXPECT_EQ(std::memcmp(cuda.decode.data(), streamed.decode.data(), cuda.decode.size() * 4), 0) << "streamed decode";
  EXPECT_EQ(std::memcmp(cuda.prefill.data(), streamed.prefill.data(), cuda.prefill.size() * 4), 0) << "streamed prefill";
  EXPECT_GT(streamed.stats.gpu_misses, 0u);
  const auto own = run(path, toks, steps, -1, 0, stream::PolicyKind::Hot);
  EXPECT_NE(std::memcmp(cuda.decode.data(), own.decode.data(), cuda.decode.size() * 4), 0) << "routing unchanged";
}

TEST(CudaStream, FlashGeometryBitIdentical) { check("flash3", 24); }

// The engine's path: --expert-cache-gpu parsed and planned, the tier attached to the shared
// backend, counters in expert_counters(); the greedy continuation and every step's logits equal
// the resident engine's.
TEST(CudaStream, EngineStreamsThroughTheGpuTier) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string path = model_file("demo");
  if (path.empty() || !fs::exists(path)) GTEST_SKIP() << "DS4_DEMO not given";
  auto go = [&](bool streaming, const char* host_compute = "auto") {
    EngineOptions eo;
    eo.model_path = path;
    eo.backend = "cuda";
    eo.ctx_size = 256;
    eo.max_batch = 16;
    if (streaming) {
      eo.ssd_streaming = true;
      gguf::File f = gguf::File::open(path);
      const int64_t K = std::max<int64_t>(1, stream::experts_used_per_token(f));
      const int64_t nl = stream::ExpertLayout::from_gguf(f).n_layer;
      eo.expert_cache_host = std::to_string(nl * K + 2);
      eo.expert_cache_gpu = std::to_string(2 * K);
      eo.expert_host_compute = host_compute;
    }
    auto engine = Engine::open(eo);
    if (streaming) {
      EXPECT_NE(engine->memory_plan().expert_streaming.find("gpu tier"), std::string::npos)
          << engine->memory_plan().expert_streaming;
      const bool cpu = std::string(host_compute) == "cpu";
      EXPECT_NE(engine->memory_plan().expert_streaming.find(cpu ? "computed on the CPU" : "copied over the link"),
                std::string::npos)
          << engine->memory_plan().expert_streaming;
    }
    auto s = engine->new_session();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 30; ++i) prompt.push_back(3 + 7 * i % 500);
    s->sync(prompt);
    std::vector<std::vector<float>> lg{std::vector<float>(s->logits().begin(), s->logits().end())};
    for (int i = 0; i < 32; ++i) {
      const int32_t t = argmax(s->logits().data(), static_cast<int64_t>(s->logits().size()));
      s->eval(std::vector<int32_t>{t});
      lg.emplace_back(s->logits().begin(), s->logits().end());
    }
    if (streaming) {
      const auto c = engine->expert_counters();
      EXPECT_TRUE(c.has_value());
      if (c) {
        EXPECT_GT(c->gpu_hits, 0u);
        EXPECT_GT(c->gpu_misses, 0u);
        EXPECT_GT(c->h2d_bytes, 0u);  // host compute too: the free slots fill first
        EXPECT_GT(c->gpu_budget_bytes, 0u);
        if (std::string(host_compute) == "cpu") {
          EXPECT_GT(c->host_computed_bytes, 0u);
        } else {
          EXPECT_EQ(c->host_computed_bytes, 0u);
        }
      }
      std::fprintf(stderr, "[cuda-stream] engine\n%s", engine->expert_stats().c_str());
    }
    return lg;
  };
  // auto copies at the default rates (stream/planner.h: the H200 machine's link beats its CPU).
  const auto a = go(false), b = go(true), c = go(true, "cpu");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4), 0) << "step " << i;
    EXPECT_EQ(std::memcmp(a[i].data(), c[i].data(), a[i].size() * 4), 0) << "host compute, step " << i;
  }
}

}  // namespace
