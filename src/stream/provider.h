#pragma once
// ExpertProvider: routed-expert weights on demand, from a host-RAM cache in front of the
// expert store (store.h), for model code that asks by (layer, experts).
//
//   provider->begin_tokens(tokens);                     // before evaluating these tokens
//   ...  at layer L, after routing n tokens to k experts each:
//   ExpertLease lease = provider->acquire(L, routing, k);
//   while (const ExpertLease::Expert* x = lease.next())  // cached experts first, then misses
//     compute(x->id, x->gate, x->up, x->down);            // as their reads complete
//
// A view returned by next() stays valid until the following next() (or the lease's end): the
// expert is pinned until then and never evicted while in flight or pinned. Misses of one
// acquire are submitted as one batch; cached experts are computed while they load. The order
// experts come back in depends on timing, so callers must combine results in an order of
// their own (the DeepSeek MoE sums per routing slot).
//
// Prefetch, each switchable and counted in Stats:
//   hash       begin_tokens() of a single token queues the experts its hash-routed layers
//              (tid2eid) will use, before the first layer runs;
//   lookahead  hint(L, guesses) queues guesses made by the model (e.g. layer L's router on an
//              earlier layer's hidden state); queued guesses are dropped once acquire() passes
//              their layer;
//   protect    prefetched experts are not evicted for `protect_tokens` tokens unless nothing
//              else can go.
// Demand reads go first: the disk serves every read in flight in parallel, and an io_uring
// read cannot be taken back, so prefetch reads are submitted only while no read a lease waits
// for is in flight, earliest layer first (not while prefetch reads of an earlier layer are in
// flight), at most `prefetch_inflight` experts at a time, and lookahead guesses only within
// the budget of `prefetch_budget`.
//
// Device tier (device_tier.h), optional: attach_device() puts a cache of experts in device
// memory above the host cache. Then acquire() looks there first: its hits are handed out first,
// as views into device memory, and never reach the host tier, which sees (counts and ranks)
// only the device tier's misses, as a CPU's L2 sees its L1's misses. A miss is served from
// the host tier as above and copied into a device slot; the lease then hands out the device
// copy. Prefetch reads fill the host tier only (a copy to the device is one PCIe transfer away
// and would evict device slots on a guess).
//
// Host compute (ProviderOptions::host_compute): the other way to use an expert the device tier
// misses (issue 14; llama.cpp's tensor overrides and KTransformers do this): compute it on the
// CPU where it sits instead of copying it over the link. The lease then hands out its host
// views with Expert::host set, and the caller runs it on a host backend (model/common/
// streamed_experts.cpp). The device tier still fills while it has free slots (a copy into a
// free slot evicts nothing and every later hit saves the CPU the work); once it is full, misses
// are computed on the host and nothing is evicted from it, except for an expert that more than
// `host_compute_max_rows` of the layer's tokens use (prefill): the CPU's work grows with its
// rows and a copy's does not, so that one is copied as without host compute. Without a device
// tier every expert is a host view anyway; host_compute only marks and counts them.
//
// One thread at a time (the evaluation thread); stats() may be called from any thread.
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "stream/io.h"
#include "stream/layout.h"
#include "stream/policy.h"
#include "stream/store.h"

namespace ds4::gguf {
class File;
}

namespace ds4::stream {

struct ProviderOptions {
  StoreOptions store;
  uint64_t budget_bytes = 0;  // host cache; 0 = every expert (the whole expert set stays cached)
  int64_t budget_slots = 0;   // > 0: this many slots of the largest expert (overrides budget_bytes)
  PolicyKind policy = PolicyKind::Hot;
  int decay_tokens = EvictionPolicy::kDefaultDecayTokens;    // hot policy (policy.h)
  int recent_tokens = EvictionPolicy::kDefaultRecentTokens;
  IoKind io = IoKind::Auto;
  unsigned io_depth = 64;
  unsigned io_threads = 8;
  bool record_reads = false;  // packed file: one read per expert instead of one per component
  bool prefetch_hash = true;
  bool prefetch_lookahead = true;
  bool protect = true;
  int protect_tokens = 2;
  unsigned prefetch_inflight = 8;
  // Lookahead guesses are submitted only as far as the disk can read them in the time it has no
  // demand between layers (measured: the gap from the last demand read's completion to the next
  // acquire, which includes compute inside a lease, times the demand reads' rate), weighed by their measured precision (provider.cpp pump_prefetch), so a
  // wrong guess stands in front of the next layer's demand only where a right one pays more.
  bool prefetch_budget = true;
  // Device-tier misses are computed where they sit in host memory instead of copied into a
  // device slot (header comment; the planner's choose_host_compute decides it for --expert-host-compute auto).
  bool host_compute = false;
  // ... for experts with at most this many rows (tokens routed to them in one acquire); more
  // are copied. Decode has one row per expert. The default is a guess, not measured: up to a
  // few rows the CPU's time is mostly reading the weights, which is what the planner's rule
  // compares with the link; beyond, the CPU's arithmetic grows with the rows.
  int64_t host_compute_max_rows = 4;
  std::string trace_path;  // routing trace (trace.h); "" = none
  // Tests: the I/O engine to use instead of make_io_engine(io, ...) (e.g. one that records or
  // delays reads).
  std::function<std::unique_ptr<IoEngine>()> io_factory;
};

enum PrefetchKind : int { kPrefetchHash = 0, kPrefetchLookahead = 1 };

struct ProviderStats {
  uint64_t tokens = 0;
  uint64_t acquires = 0;
  uint64_t hits = 0;           // selected experts found cached
  uint64_t inflight_hits = 0;  // found being read by a prefetch
  uint64_t misses = 0;         // demand reads
  uint64_t prefetch_issued[2] = {0, 0};
  uint64_t prefetch_useful[2] = {0, 0};   // prefetched, then selected before eviction
  uint64_t prefetch_wasted[2] = {0, 0};   // prefetched, evicted unused
  // Prefetched and neither used nor evicted yet (cached or in flight): wasted if never selected,
  // which "wasted" alone would not show (the offline replay counts them as wasted at its end).
  uint64_t prefetch_unresolved(int k) const {
    const uint64_t done = prefetch_useful[k] + prefetch_wasted[k];
    return prefetch_issued[k] > done ? prefetch_issued[k] - done : 0;
  }
  uint64_t prefetch_dropped[2] = {0, 0};  // queued guesses dropped (layer passed, no room, no budget)
  uint64_t evictions = 0;
  uint64_t reads = 0;
  uint64_t bytes_read = 0;
  uint64_t stall_ns = 0;  // time next() waited for reads
  // Demand against prefetch on the disk (the disk serves what is in flight in parallel, so a
  // prefetch read in flight when demand is submitted takes bandwidth from that demand).
  uint64_t demand_batches = 0;        // acquire()s that submitted demand reads
  uint64_t demand_behind_prefetch = 0;  // prefetch reads in flight at those submissions (sum)
  uint64_t prefetch_during_demand = 0;  // prefetch reads submitted while demand reads were in flight
  uint64_t demand_expert_ns = 0;      // demand loads: submission to last byte (sum), see demand_experts
  uint64_t demand_experts = 0;
  uint64_t budget_bytes = 0;
  uint64_t cached_bytes = 0;
  // Device tier (all 0 without one). gpu_misses = selections the host tier then served.
  int64_t gpu_slots = 0, gpu_used = 0;
  uint64_t gpu_slot_bytes = 0;
  uint64_t gpu_hits = 0, gpu_misses = 0, gpu_evictions = 0;
  bool gpu_admission = false;   // DeviceTier admission (hot policy)
  uint64_t gpu_transient = 0;   // experts it copied in as transient (not admitted)
  uint64_t h2d_copies = 0, h2d_bytes = 0;  // host-to-device copies into device slots
  uint64_t host_unpinned = 0;               // host buffers the backend could not page-lock
  // host_compute: experts handed out as host views (computed where they sit), and their bytes.
  uint64_t host_computed = 0, host_computed_bytes = 0;
  bool host_compute = false;  // the option was on
  double hit_rate() const {
    const uint64_t n = hits + inflight_hits + misses;
    return n ? static_cast<double>(hits + inflight_hits) / static_cast<double>(n) : 0.0;
  }
  double gpu_hit_rate() const {
    const uint64_t n = gpu_hits + gpu_misses;
    return n ? static_cast<double>(gpu_hits) / static_cast<double>(n) : 0.0;
  }
  std::string describe() const;  // multi-line, for --stats
};

class ExpertProvider;
class DeviceSlots;
class DeviceTier;

class ExpertLease {
 public:
  struct Expert {
    int32_t id = -1;
    WeightView gate, up, down;
    // Where the views point: true = the host cache (host memory), false = a device slot. On a
    // provider without a device tier always true (the CPU backend reads the host cache in place).
    bool host = true;
  };
  ExpertLease(ExpertLease&& o) noexcept;
  ExpertLease& operator=(ExpertLease&&) = delete;
  ExpertLease(const ExpertLease&) = delete;
  ~ExpertLease();
  // The next expert to compute, nullptr when all were returned. Throws ds4::Error on a failed
  // or short read, a checksum mismatch (verify_reads) or a budget too small to proceed.
  const Expert* next();
  // Whether an expert still to come may be handed out as a host view while a device tier is
  // attached (host_compute), so the caller can bring its input rows to the host before it
  // queues device work that a download would then wait for. Conservative: a miss that finds a
  // free device slot is copied after all.
  bool may_hand_out_host() const;

 private:
  friend class ExpertProvider;
  ExpertLease(ExpertProvider* p, int64_t layer) : p_(p), layer_(layer) {}
  void unpin_current();
  ExpertProvider* p_;
  int64_t layer_;
  std::vector<uint32_t> ready_, waiting_, deferred_;  // entry ids
  std::vector<uint32_t> dev_ready_;                   // device-tier hits, pinned there
  std::vector<uint32_t> rows_;                        // host_compute: per expert of the layer, its rows
  uint32_t current_ = UINT32_MAX;                     // host entry handed out last
  uint32_t current_dev_ = UINT32_MAX;                 // device entry handed out last
  uint64_t serial_ = 0;                               // the device tier's lease number
  bool done_ = false;                                 // next() returned nullptr once
  Expert out_;
};

class ExpertProvider {
 public:
  static std::unique_ptr<ExpertProvider> open(const gguf::File& f, const ProviderOptions& opt);
  ~ExpertProvider();

  const ExpertLayout& layout() const { return store_->layout(); }
  const ExpertStore& store() const { return *store_; }
  const ProviderOptions& options() const { return opt_; }
  const char* io_name() const { return io_->name(); }
  int64_t n_hash_layers() const { return static_cast<int64_t>(tid2eid_.size()); }
  // Whether hint() guesses are used (lookahead prefetch on, or a trace records them).
  bool wants_lookahead() const { return opt_.prefetch_lookahead || trace_ != nullptr; }

  void begin_tokens(std::span<const int32_t> tokens);
  void hint(int64_t layer, std::span<const int32_t> experts, PrefetchKind kind = kPrefetchLookahead);
  // routing: n tokens x k expert ids (each in [0, n_expert)), as the router chose them.
  ExpertLease acquire(int64_t layer, std::span<const int32_t> routing, int64_t k);
  ProviderStats stats() const;

  // The device tier: n_slots slots of slot_bytes() each in the memory `slots` gives (see the
  // header comment). Must come before the first acquire (the host buffers it page-locks are
  // made from then on). The backend behind `slots` must stay alive until detach_device(),
  // which the destructor calls if nobody did.
  void attach_device(std::unique_ptr<DeviceSlots> slots, int64_t n_slots);
  // Waits for the copies in flight, unpins the host buffers and frees the device slots.
  void detach_device() noexcept;
  bool has_device() const { return dev_ != nullptr; }
  // The largest host slot (bytes): what one expert of any layer takes in a slot of either tier.
  uint64_t slot_bytes() const { return max_slot_; }
  int64_t experts_per_token() const { return k_; }

 private:
  friend class ExpertLease;
  struct Entry;
  ExpertProvider() = default;
  bool start_load(uint32_t id, bool prefetch, int kind);
  bool evict_one(bool allow_protected);
  void handle(const ReadDone& d);
  void flush();
  void pump_prefetch();
  bool reap(bool block, bool pump = true);
  bool pf_earlier_in_flight(int64_t layer) const;
  void unpin(uint32_t id);
  WeightView view(uint32_t id, int c) const;
  WeightView dev_view(uint32_t id, int c) const;
  void to_device(uint32_t id, uint64_t serial);  // copy a Ready host entry into a device slot
  bool release_pending(bool wait);               // unpin host entries whose copies have passed

  ProviderOptions opt_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<IoEngine> io_;
  std::unique_ptr<class SlotPool> pool_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> resident_;      // ids in Loading or Ready
  std::vector<uint32_t> resident_pos_;  // index into resident_, or UINT32_MAX
  std::vector<ReadOp> batch_;
  struct Queued {
    uint32_t id;
    int64_t layer;
    int kind;
  };
  std::vector<Queued> prefetch_queue_;
  unsigned prefetch_inflight_ = 0;
  // Reads in the I/O engine: those submitted as prefetch, and those a lease waits for (demand
  // loads and prefetches that acquire() claimed while still loading).
  uint64_t pf_reads_ = 0, dem_reads_ = 0;
  std::vector<uint32_t> pf_layer_;  // per layer: prefetched experts whose reads are in flight
  // Lookahead budget (prefetch_budget): EMAs of the disk's gap between layers and of the demand read
  // rate (< 0: not measured yet, no limit), and the bytes left for the current gap.
  double gap_ns_ = -1, bytes_per_ns_ = -1, budget_left_ = 1e300;
  // Since when no demand read has been on the disk (the last one's completion, or an acquire
  // that submitted none); 0: demand in flight, or not yet measured. From there to the next
  // acquire is the gap the next layer's guesses can use: it includes the compute after a
  // lease's last read, inside the lease (host compute) or after it.
  int64_t idle_from_ns_ = 0;
  int64_t dem_t0_ = 0;                   // when the demand reads in flight started (dem_reads_ 0 -> >0)
  uint64_t dem_bytes_ = 0;               // bytes those demand reads carry
  bool dem_mixed_ = false;               // prefetch reads shared the disk with them: no sample
  std::vector<std::vector<int32_t>> tid2eid_;  // hash layers: [vocab][k]
  int64_t hash_k_ = 0;
  uint64_t clock_ = 0, tokens_ = 0;
  int64_t pos_ = 0;      // trace position of the next begin_tokens' first token
  int64_t pos_cur_ = 0;  // trace position of the current batch's first token
  std::unique_ptr<class TraceWriter> trace_;
  uint64_t max_slot_ = 0;
  int64_t k_ = 0;  // experts per token (0 when the file does not say)

  std::unique_ptr<DeviceTier> dev_;
  std::vector<std::array<uint32_t, 3>> dev_lead_;            // per id: component offsets in its device slot
  std::deque<std::pair<uint32_t, uint64_t>> pending_;        // host entry pinned until the fence passes
  std::unordered_set<uint8_t*> pinned_;                      // host buffers page-locked for the device

  struct AtomicStats;
  std::unique_ptr<AtomicStats> st_;
};

// "8GB", "512MiB", "300" (slots) style budget strings: returns bytes (GB/GiB/MB/MiB/KB/B) or,
// for a bare integer, sets *slots. Throws ds4::Error naming the flag on anything else.
uint64_t parse_budget(const std::string& s, const char* flag, int64_t* slots);

}  // namespace ds4::stream
