// ds4-gguf stream-bench MODEL.gguf: drives the expert cache and its I/O path with routing from
// a trace or from the benchmark-only synthetic source, without computing anything (or with a
// fixed emulated compute time per layer), and reports read bandwidth, hit rates, prefetch
// figures and I/O stall per token. Own file so it can move to ds4-bench. --sweep GB measures
// the disk instead: the best rate the same I/O path reaches (every queue slot busy), which is
// what a bound "disk bandwidth / bytes per token" should divide by.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "stream/device_tier.h"
#include "stream/io.h"
#include "stream/provider.h"
#include "stream/replay.h"
#include "stream/store.h"

namespace {

using namespace ds4::stream;

// DeviceSlots over host memory, for --gpu-cache: the tier's bookkeeping (admission, eviction,
// the host tier's exclusive eviction) on a machine without a GPU. Copies are memcpy and done at
// once; only the cache figures mean what they would on a GPU, not the copy time.
class HostMemorySlots final : public DeviceSlots {
 public:
  uint8_t* alloc(uint64_t bytes) override {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
    if (!p) throw ds4::Error(fmt::format("stream-bench --gpu-cache: cannot allocate {} bytes", bytes));
    return p;
  }
  void release(uint8_t* p) override { std::free(p); }
  bool pin_host(void*, uint64_t) override { return true; }
  void unpin_host(void*) override {}
  void upload(uint8_t* dst, const uint8_t* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  uint64_t fence() override { return ++made_; }
  bool done(uint64_t, bool) override { return true; }
  uint64_t free_bytes() override { return 0; }

 private:
  uint64_t made_ = 0;
};

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf stream-bench MODEL.gguf [options]\n"
               "  --cache B          host cache: 8GB, 512MiB or N slots (default: 28%% of the experts)\n"
               "  --policy P         hot | lru (default hot)\n"
               "  --decay N          hot: counts halve every N tokens (default 256)\n"
               "  --recent N         hot: experts selected in the last N tokens go last (default 2; 0: off)\n"
               "  --prefetch LIST    none | all | hash,lookahead,protect (default all)\n"
               "  --io E             auto | uring | pread (default auto)\n"
               "  --io-depth N       reads in flight at most (default 64)\n"
               "  --record-reads     one read per expert (packed file) instead of one per component\n"
               "  --no-direct        buffered reads (page cache) instead of O_DIRECT\n"
               "  --packed FILE      packed expert file (default MODEL.gguf.experts if present; '-' = GGUF)\n"
               "  --gpu-cache B      a gpu tier above the host cache, emulated in host memory (copies are\n"
               "                     memcpy): N slots or P%% of the experts (default none); its admission\n"
               "                     (hot policy) and the host tier's exclusive eviction run as on a GPU\n"
               "  --compute-us N     emulated compute per layer and token (sleep), for overlap (default 0)\n"
               "  --expert-us N      emulated compute per expert inside the lease, as host compute does\n"
               "                     (sleep after each expert handed out; default 0)\n"
               "  --trace FILE       routing from a trace; else synthetic: --tokens N (256) --zipf A --reuse P\n"
               "                     --guesses N --guess-recall Q --seed S (see replay-routing)\n"
               "  --warmup N         tokens before the clock starts (default 32)\n"
               "  --sweep GB         instead: read GB of whole experts in random order (layer and expert),\n"
               "                     every one of the I/O path's --io-depth slots (default 64) kept busy; the\n"
               "                     disk's rate for this path\n");
  return 2;
}

// Reads `gb` GB of experts (each one's components, or its record with record_reads) in a random
// (layer, expert) order through the engine's I/O engine with `depth` reads in flight, and prints
// the rate. Nothing is cached, so a second pass over the same experts reads the disk again
// (O_DIRECT; buffered reads would measure the page cache, which the caller should drop).
int sweep(const ds4::gguf::File& f, const ProviderOptions& o, double gb, unsigned depth) {
  auto store = ExpertStore::open(f, o.store);
  const ExpertLayout& L = store->layout();
  auto io = make_io_engine(o.io, depth, o.io_threads);
  std::vector<ComponentRead> reads;
  std::vector<int64_t> order(static_cast<size_t>(L.n_layer * L.n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  const bool record = o.record_reads && store->packed();
  uint32_t max_len = 0;
  for (int64_t id : order) {
    const int64_t l = id / L.n_expert, e = id % L.n_expert;
    if (record) {
      reads.push_back(store->record(l, e));
    } else {
      for (int c = 0; c < 3; ++c) reads.push_back(store->component(l, e, c));
    }
  }
  for (const auto& r : reads) max_len = std::max(max_len, r.len);
  const uint64_t want = static_cast<uint64_t>(gb * 1e9);
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  const size_t stride = (static_cast<size_t>(max_len) + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::unique_ptr<uint8_t, Free> buf(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, stride * depth)));
  if (!buf) throw ds4::Error("stream-bench --sweep: cannot allocate the read buffers");
  std::vector<unsigned> free_slots(depth);
  std::iota(free_slots.begin(), free_slots.end(), 0u);
  uint64_t done = 0, submitted = 0, n_reads = 0;
  size_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < want || io->in_flight() > 0) {
    std::vector<ReadOp> ops;
    while (submitted < want && !free_slots.empty()) {
      const ComponentRead& r = reads[next];
      next = (next + 1) % reads.size();
      const unsigned s = free_slots.back();
      free_slots.pop_back();
      ops.push_back({store->fd(), r.offset, r.len, buf.get() + stride * s, s, false});
      submitted += r.len;
    }
    if (!ops.empty()) io->submit(ops);
    ReadDone d;
    if (!io->reap(d, true)) break;
    if (d.result < 0) throw ds4::Error(fmt::format("stream-bench --sweep: read failed: errno {}", -d.result));
    done += static_cast<uint64_t>(d.result);
    ++n_reads;
    free_slots.push_back(static_cast<unsigned>(d.tag));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("stream-bench sweep: source {} ({}, {}), I/O {}, {} reads in flight, {} per expert, random order\n",
             store->source_path(), store->packed() ? "packed" : "GGUF", store->direct() ? "O_DIRECT" : "buffered: page cache",
             io->name(), depth, record ? "one read" : "3 reads");
  fmt::print("sweep read {:.3f} GB in {} reads, {:.3f} s = {:.3f} GB/s\n", done / 1e9, n_reads, secs, done / 1e9 / secs);
  return 0;
}

int cmd_stream_bench(int argc, char** argv) {
  std::string model, trace_path, cache = "28%", gpu_cache, policy = "hot", prefetch = "all", io = "auto", packed;
  bool record = false, direct = true;
  int64_t compute_us = 0, expert_us = 0, warmup = 32;
  double sweep_gb = 0;
  unsigned io_depth = 64;
  int decay = EvictionPolicy::kDefaultDecayTokens, recent = EvictionPolicy::kDefaultRecentTokens;
  SyntheticRouting syn;
  syn.n_tokens = 256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ds4::Error("stream-bench: " + a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--cache") cache = value();
      else if (a == "--gpu-cache") gpu_cache = value();
      else if (a == "--policy") policy = value();
      else if (a == "--prefetch") prefetch = value();
      else if (a == "--decay") decay = std::stoi(value());
      else if (a == "--recent") recent = std::stoi(value());
      else if (a == "--io") io = value();
      else if (a == "--record-reads") record = true;
      else if (a == "--no-direct") direct = false;
      else if (a == "--packed") packed = value();
      else if (a == "--compute-us") compute_us = std::stoll(value());
      else if (a == "--expert-us") expert_us = std::stoll(value());
      else if (a == "--trace") trace_path = value();
      else if (a == "--tokens") syn.n_tokens = std::stoll(value());
      else if (a == "--zipf") syn.zipf = std::stod(value());
      else if (a == "--reuse") syn.reuse = std::stod(value());
      else if (a == "--guesses") syn.guesses = std::stoll(value());
      else if (a == "--guess-recall") syn.guess_recall = std::stod(value());
      else if (a == "--seed") syn.seed = std::stoull(value());
      else if (a == "--warmup") warmup = std::stoll(value());
      else if (a == "--sweep") sweep_gb = std::stod(value());
      else if (a == "--io-depth") io_depth = static_cast<unsigned>(std::stoul(value()));
      else if (a == "-h" || a == "--help") return usage();
      else if (!a.empty() && a[0] == '-') {
        std::fprintf(stderr, "stream-bench: unknown argument '%s'\n", a.c_str());
        return usage();
      } else if (model.empty()) model = a;
      else return usage();
    } catch (const std::logic_error&) {
      std::fprintf(stderr, "stream-bench: bad value for %s\n", a.c_str());
      return 2;
    }
  }
  if (model.empty()) return usage();
  try {
    ds4::gguf::File f = ds4::gguf::File::open(model);
    ProviderOptions o;
    o.store.packed_path = packed;
    o.store.direct_io = direct;
    o.policy = parse_policy(policy);
    o.decay_tokens = decay;
    o.recent_tokens = recent;
    o.io = io == "uring" ? IoKind::Uring : io == "pread" ? IoKind::Pread : IoKind::Auto;
    o.record_reads = record;
    o.io_depth = io_depth;
    if (sweep_gb > 0) return sweep(f, o, sweep_gb, io_depth);
    o.prefetch_hash = o.prefetch_lookahead = o.protect = false;
    for (size_t at = 0; at <= prefetch.size();) {
      size_t c = prefetch.find(',', at);
      if (c == std::string::npos) c = prefetch.size();
      const std::string p = prefetch.substr(at, c - at);
      if (p == "all") o.prefetch_hash = o.prefetch_lookahead = o.protect = true;
      else if (p == "hash") o.prefetch_hash = true;
      else if (p == "lookahead") o.prefetch_lookahead = true;
      else if (p == "protect") o.protect = true;
      else if (p != "none") throw ds4::Error("stream-bench: unknown prefetch '" + p + "'");
      at = c + 1;
    }
    const ExpertLayout layout = ExpertLayout::from_gguf(f);
    // "P%": that share of all the experts, in slots (--cache, --gpu-cache); else nullopt.
    auto percent_slots = [&](const std::string& spec) -> std::optional<int64_t> {
      if (spec.empty() || spec.back() != '%') return std::nullopt;
      return static_cast<int64_t>(std::stod(spec.substr(0, spec.size() - 1)) / 100.0 *
                                  static_cast<double>(layout.n_layer * layout.n_expert));
    };
    if (const auto slots = percent_slots(cache)) {
      o.budget_slots = *slots;
    } else {
      o.budget_bytes = parse_budget(cache, "--cache", &o.budget_slots);
    }
    const bool hash = o.prefetch_hash;
    o.prefetch_hash = false;  // the bench sends the hash layers' experts itself (from the routing)
    auto prov = ExpertProvider::open(f, o);
    if (!gpu_cache.empty()) {
      int64_t slots = 0;
      if (const auto pct = percent_slots(gpu_cache)) {
        slots = *pct;
      } else {
        const uint64_t b = parse_budget(gpu_cache, "--gpu-cache", &slots);
        if (b > 0) slots = static_cast<int64_t>(b / prov->slot_bytes());
      }
      if (slots < 1) throw ds4::Error("stream-bench: --gpu-cache " + gpu_cache + " holds no expert");
      prov->attach_device(std::make_unique<HostMemorySlots>(), slots);
    }
    const int64_t k = static_cast<int64_t>(f.get_uint("deepseek4.expert_used_count").value_or(6));
    Trace t;
    if (!trace_path.empty()) {
      t = read_trace(trace_path);
      if (t.header.n_layer != layout.n_layer || t.header.n_expert != layout.n_expert)
        throw ds4::Error("stream-bench: the trace's geometry differs from the model's");
    } else {
      syn.n_layer = layout.n_layer;
      syn.n_expert = layout.n_expert;
      syn.k = k;
      syn.n_hash_layers = prov->n_hash_layers();
      syn.n_tokens += warmup;
      t = synthetic_trace(syn);
    }
    const ProviderStats zero{};
    ProviderStats at_start = zero;
    auto t0 = std::chrono::steady_clock::now();
    int64_t pos = -1, timed = 0;
    std::vector<uint64_t> layer_miss(static_cast<size_t>(layout.n_layer), 0);
    for (const auto& r : t.records) {
      if (r.pos != pos) {
        pos = r.pos;
        if (pos == warmup) {
          at_start = prov->stats();
          t0 = std::chrono::steady_clock::now();
        }
        if (pos >= warmup) ++timed;
        // The hash layers' experts are known from the token; here from the trace itself.
        std::vector<int32_t> dummy = {0};
        prov->begin_tokens(dummy);
        if (hash)
          for (const auto& q : t.records)
            if (q.pos == pos && !q.hint && q.layer < t.header.n_hash_layers) prov->hint(q.layer, q.experts, kPrefetchHash);
      }
      if (r.hint) continue;  // sent right after the acquire of the layer before (below)
      const uint64_t m0 = prov->stats().misses;
      ExpertLease lease = prov->acquire(r.layer, r.experts, static_cast<int64_t>(r.experts.size()));
      // The engine hints layer L+1's guesses right after acquiring layer L (streamed_experts.cpp),
      // so they can use layer L's compute; the trace records them after layer L's routing.
      if (&r + 1 != t.records.data() + t.records.size() && (&r + 1)->hint && (&r + 1)->pos == pos)
        prov->hint((&r + 1)->layer, (&r + 1)->experts, kPrefetchLookahead);
      while (lease.next())
        if (expert_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(expert_us));
      if (pos >= warmup) layer_miss[static_cast<size_t>(r.layer)] += prov->stats().misses - m0;
      if (compute_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(compute_us));
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ProviderStats s = prov->stats();
    auto d = [](uint64_t a, uint64_t b) { return static_cast<double>(a - b); };
    const double sel = d(s.hits + s.inflight_hits + s.misses, at_start.hits + at_start.inflight_hits + at_start.misses);
    const double bytes = d(s.bytes_read, at_start.bytes_read);
    const ExpertStore& st = prov->store();
    fmt::print("stream-bench {}: source {} ({}, {}), I/O {}, {} reads per expert, policy {}, prefetch {}, cache {:.2f} GiB "
               "({} of {} experts at most)\n",
               model, st.source_path(), st.packed() ? "packed" : "GGUF", st.direct() ? "O_DIRECT" : "buffered: page cache",
               prov->io_name(), o.record_reads && st.packed() ? 1 : 3, policy, prefetch, s.budget_bytes / 1073741824.0,
               s.budget_bytes / layout.max_expert_bytes(), layout.n_layer * layout.n_expert);
    fmt::print("routing: {}; {} timed tokens after {} warm-up, emulated compute {} us per layer, {} us per expert\n",
               trace_path.empty() ? fmt::format("synthetic zipf {} reuse {} guesses {} recall {} seed {}", syn.zipf,
                                                syn.reuse, syn.guesses, syn.guess_recall, syn.seed)
                                  : "trace " + trace_path,
               timed, warmup, compute_us, expert_us);
    fmt::print("time {:.3f} s = {:.2f} tokens/s; read {:.3f} GB = {:.3f} GB/s ({:.1f} MB/token); hit {:.2f}%; stall "
               "{:.2f} ms/token\n",
               secs, timed / secs, bytes / 1e9, bytes / 1e9 / secs, bytes / 1e6 / timed,
               100.0 * d(s.hits + s.inflight_hits, at_start.hits + at_start.inflight_hits) / sel,
               d(s.stall_ns, at_start.stall_ns) / 1e6 / timed);
    const double db = d(s.demand_batches, at_start.demand_batches);
    const double de = d(s.demand_experts, at_start.demand_experts);
    fmt::print("demand vs prefetch: {:.2f} prefetch reads in flight per demand batch ({:.0f} batches), {:.1f} prefetch "
               "reads per token submitted while demand was in flight, demand load {:.2f} ms per expert\n",
               db ? d(s.demand_behind_prefetch, at_start.demand_behind_prefetch) / db : 0.0, db,
               d(s.prefetch_during_demand, at_start.prefetch_during_demand) / timed,
               de ? d(s.demand_expert_ns, at_start.demand_expert_ns) / 1e6 / de : 0.0);
    for (int kk = 0; kk < 2; ++kk)
      fmt::print("prefetch {}: {} issued, {} useful, {} wasted, {} dropped; at the end {} (of all since the start) unresolved\n",
                 kk ? "lookahead" : "hash", s.prefetch_issued[kk] - at_start.prefetch_issued[kk],
                 s.prefetch_useful[kk] - at_start.prefetch_useful[kk], s.prefetch_wasted[kk] - at_start.prefetch_wasted[kk],
                 s.prefetch_dropped[kk] - at_start.prefetch_dropped[kk], s.prefetch_unresolved(kk));
    {
      double useful = 0, wasted = 0, unresolved = 0;
      for (int kk = 0; kk < 2; ++kk) {
        useful += d(s.prefetch_useful[kk], at_start.prefetch_useful[kk]);
        wasted += d(s.prefetch_wasted[kk], at_start.prefetch_wasted[kk]);
        unresolved += static_cast<double>(s.prefetch_unresolved(kk));
      }
      const double miss = d(s.misses, at_start.misses);
      // Coverage as the GPU evidence script counts it: demand reads a prefetch took over. Unused
      // per useful: the wasted ones plus every prefetch still unused at the end, the waste's
      // upper bound (as ds4-bench's unused_per_useful).
      fmt::print("prefetch coverage {:.3f}, wasted per useful {:.3f}, unused per useful {:.3f}\n",
                 useful + miss > 0 ? useful / (useful + miss) : 0.0, useful > 0 ? wasted / useful : 0.0,
                 useful > 0 ? (wasted + unresolved) / useful : 0.0);
    }
    if (s.gpu_slots > 0)
      fmt::print("gpu tier (emulated in host memory): {} slots, hit {:.2f}%, {} evictions, {} copied in as transient{}\n",
                 s.gpu_slots,
                 100.0 * d(s.gpu_hits, at_start.gpu_hits) /
                     std::max(1.0, d(s.gpu_hits + s.gpu_misses, at_start.gpu_hits + at_start.gpu_misses)),
                 s.gpu_evictions - at_start.gpu_evictions, s.gpu_transient - at_start.gpu_transient,
                 s.gpu_admission ? "" : " (admission off: every miss admitted)");
    std::string pl = "misses per token by layer:";
    for (uint64_t m : layer_miss) pl += fmt::format(" {:.1f}", static_cast<double>(m) / timed);
    fmt::print("{}\n", pl);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stream-bench: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"stream-bench", "MODEL.gguf [--cache ..] [--policy ..] [--prefetch ..] [--io ..]   expert I/O path benchmark",
     cmd_stream_bench});

}  // namespace
