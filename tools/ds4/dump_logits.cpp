// Logits-dump mode: one prefill of all tokens, or one token at a time (--incremental).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <memory>

#include "compute/backends.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "session/engine_impl.h"
#include "gguf/gguf.h"
#include "model/deepseek4/model.h"
#include "stream/device_tier.h"
#include "stream/planner.h"
#include "stream/setup.h"
#include "stream/synthetic_routing.h"
#include "options.h"

namespace ds4::tools {

namespace {

void write_f32_le(const std::string& path, const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little, "logits dump assumes a little-endian host");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("{}: cannot open for writing", path);
  size_t w = std::fwrite(v.data(), sizeof(float), v.size(), f);
  int c = std::fclose(f);
  if (w != v.size() || c != 0) fail("{}: write failed", path);
}

}  // namespace

void run_dump_logits(const Ds4Options& opts) {
  using clock = std::chrono::steady_clock;
  model::deepseek4::Options mo;
  mo.act_quant_sim = opts.act_quant_sim;
  auto t0 = clock::now();
  gguf::File file = gguf::File::open(opts.model_path);
  const ExpertFlags& x = opts.experts;
  EngineOptions eo;
  x.apply(eo);
  eo.backend = opts.backend;
  mo.max_batch = opts.batch > 0 ? opts.batch  // as the engine does
                                : default_max_batch(opts.backend, session::device_streams_experts(file, eo));
  stream::StreamingSetup ss = stream::setup_streaming(file, session::streaming_request(eo));  // outlives the model
  if (!ss.describe.empty()) fmt::print(stderr, "{}\n", ss.describe);
  if (!x.cache_gpu.empty() && !ss.provider)
    fail("--expert-cache-gpu {}: the gpu tier applies when the routed experts stream (--ssd-streaming)", x.cache_gpu);
  mo.experts = ss.provider.get();
  std::unique_ptr<stream::ZipfRouter> bench;  // --bench-routing; outlives the model
  if (const auto seed = stream::parse_bench_routing(x.bench_routing)) {
    const auto hp = model::deepseek4::HParams::from_gguf(file);
    if (hp.experts_pruned()) fail("--bench-routing: {} has pruned expert tensors", opts.model_path);
    stream::ZipfRoutingParams zp;
    zp.n_layer = hp.n_layer, zp.n_expert = hp.n_expert, zp.k = hp.n_expert_used, zp.seed = *seed;
    bench = std::make_unique<stream::ZipfRouter>(zp);
    mo.bench_routing = bench.get();
  }
  auto model = model::deepseek4::Model::from_file(std::move(file), mo);
  ThreadPool pool(opts.threads);
  compute::BackendOptions bo;
  bo.name = opts.backend;
  bo.pool = &pool;
  bo.float_activations = opts.float_acts;
  bo.verbose = opts.verbose;
  auto be = compute::make_backend(bo);
  model->register_weights(*be);
  // The gpu tier lives in be's memory: let go of it before be goes (declared after be).
  struct Detach {
    stream::ExpertProvider* p;
    ~Detach() {
      if (p) p->detach_device();
    }
  } detach{nullptr};
  if (ss.provider && be->device_memory()) {
    // A plain budget (no plan here): --expert-cache-gpu, or every expert that fits in half the
    // free device memory.
    stream::DeviceTierRequest r;
    r.given = x.cache_gpu;
    if (!r.given.empty()) r.budget_bytes = stream::parse_budget(r.given, "--expert-cache-gpu", &r.budget_slots);
    r.free_bytes = be->device_free_bytes();
    r.reserve_bytes = r.free_bytes / 2;
    r.slot_bytes = ss.provider->slot_bytes();
    r.expert_count = static_cast<uint64_t>(ss.provider->layout().n_layer * ss.provider->layout().n_expert);
    r.experts_per_token = ss.provider->experts_per_token();
    const stream::DeviceTierPlan p = stream::plan_device_tier(r);
    ss.provider->attach_device(stream::backend_device_slots(*be), p.slots);
    detach.p = ss.provider.get();
    fmt::print(stderr, "{}\n", p.describe);
  } else if (!x.cache_gpu.empty()) {
    fail("--expert-cache-gpu {}: the gpu tier needs a device backend (--backend cuda)", x.cache_gpu);
  }
  const auto& hp = model->hparams();
  if (opts.verbose) fmt::print(stderr, "{}\n", hp.describe());

  const size_t V = static_cast<size_t>(hp.n_vocab);
  std::vector<float> logits(opts.tokens.size() * V);
  auto state = model->new_state(*be, static_cast<int64_t>(std::max<size_t>(opts.tokens.size(), 1)));
  auto t1 = clock::now();
  if (opts.incremental) {
    for (size_t i = 0; i < opts.tokens.size(); ++i)
      model->eval(*be, state, std::span(opts.tokens).subspan(i, 1), logits.data() + i * V);
  } else {
    model->eval(*be, state, opts.tokens, logits.data());
  }
  auto t2 = clock::now();
  write_f32_le(opts.dump_logits_path, logits);
  if (opts.stats && ss.provider) fmt::print(stderr, "{}", ss.provider->stats().describe());
  if (opts.verbose) {
    double load_s = std::chrono::duration<double>(t1 - t0).count();
    double eval_s = std::chrono::duration<double>(t2 - t1).count();
    fmt::print(stderr, "load {:.3f} s; {} tokens ({}) in {:.3f} s = {:.1f} tokens/s, {} threads\n", load_s,
               opts.tokens.size(), opts.incremental ? "incremental" : fmt::format("prefill, chunks of {}", mo.max_batch), eval_s,
               static_cast<double>(opts.tokens.size()) / eval_s, pool.size());
  }
}

}  // namespace ds4::tools
