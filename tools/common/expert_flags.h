#pragma once
// The expert-streaming and residency flags, defined once for every tool that opens an engine
// (ds4, ds4-server): the same spelling, defaults and help text everywhere.
#include <CLI/CLI.hpp>

#include <string>

#include "ds4/engine.h"

namespace ds4::tools {

struct ExpertFlags {
  bool ssd_streaming = false, resident = false;
  std::string cache_host, cache_gpu, cache_policy = "hot", io = "auto", packed, trace, bench_routing;
  std::string host_compute = "auto", host_compute_rates;
  bool no_prefetch_hash = false, no_prefetch_lookahead = false, no_expert_protect = false, record_reads = false;
  double memory_reserve_gib = 2.0, host_memory_gib = 0;

  void apply(EngineOptions& eo) const {
    eo.ssd_streaming = ssd_streaming;
    eo.resident = resident;
    eo.expert_cache_host = cache_host;
    eo.expert_cache_gpu = cache_gpu;
    eo.expert_host_compute = host_compute;
    eo.expert_host_compute_rates = host_compute_rates;
    eo.expert_cache_policy = cache_policy;
    eo.expert_io = io;
    eo.expert_record_reads = record_reads;
    eo.expert_prefetch_hash = !no_prefetch_hash;
    eo.expert_prefetch_lookahead = !no_prefetch_lookahead;
    eo.expert_protect = !no_expert_protect;
    eo.packed_experts = packed;
    eo.trace_routing = trace;
    eo.bench_routing = bench_routing;
    eo.memory_reserve_gib = memory_reserve_gib;
    eo.host_memory_gib = host_memory_gib;
  }
};

inline CLI::Option_group* add_expert_flags(CLI::App& app, ExpertFlags& f) {
  auto* g = app.add_option_group("Expert streaming and residency");
  g->add_flag("--ssd-streaming", f.ssd_streaming,
              "read routed experts on demand from the GGUF (or MODEL.gguf.experts) through a host-RAM cache");
  g->add_flag("--resident", f.resident, "refuse to start unless the whole model fits in memory (no streaming)");
  g->add_option("--memory-reserve-gib", f.memory_reserve_gib,
                "memory the residency plan leaves free for everything else")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  g->add_option("--host-memory-gib", f.host_memory_gib, "host memory the plan may use (default: MemAvailable)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--expert-cache-host", f.cache_host,
                "host cache budget: 8GB, 512MiB or a slot count (default: sized by the residency plan)");
  g->add_option("--expert-cache-gpu", f.cache_gpu,
                "gpu tier budget (--backend cuda): 2GB, 512MiB or a slot count (default: sized from free device "
                "memory)");
  g->add_option("--expert-host-compute", f.host_compute,
                "gpu-tier misses (--backend cuda): cpu = computed on the CPU where they sit in host RAM, copy = "
                "copied into gpu slots, auto = the faster of the two by --expert-host-compute-rates")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "copy"}));
  g->add_option("--expert-host-compute-rates", f.host_compute_rates,
                "CPU_GBPS,LINK_GBPS: expert bytes the CPU computes per second and the host-to-device copy rate, "
                "for --expert-host-compute auto (default 23.6,49.8, measured on an H200 machine)");
  g->add_option("--expert-cache-policy", f.cache_policy, "hot (the last two tokens' experts evicted last, the rest by decayed frequency, then recency) or lru")
      ->check(CLI::IsMember({"hot", "lru"}));
  g->add_option("--expert-io", f.io, "auto (io_uring, else pread), uring or pread")
      ->check(CLI::IsMember({"auto", "uring", "pread"}));
  g->add_flag("--expert-record-reads", f.record_reads,
              "packed expert file: one read per expert (its whole record) instead of one per gate/up/down");
  g->add_flag("--no-prefetch-hash", f.no_prefetch_hash, "do not prefetch hash-routed layers' experts");
  g->add_flag("--no-prefetch-lookahead", f.no_prefetch_lookahead, "do not prefetch the next layer's router guesses");
  g->add_flag("--no-expert-protect", f.no_expert_protect, "let demand reads evict fresh prefetches");
  g->add_option("--packed-experts", f.packed, "packed expert file (default: MODEL.gguf.experts if present)");
  g->add_option("--trace-routing", f.trace, "write every token's routing to FILE (streams the experts)");
  g->add_option("--bench-routing", f.bench_routing,
                "benchmarks only: zipf[:SEED] replaces the learned layers' expert choice with synthetic routing "
                "(per-layer Zipf popularity + token-to-token locality; weights stay the router's; checked when "
                "the engine opens)");
  return g;
}

}  // namespace ds4::tools
