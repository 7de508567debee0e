#include "stream/provider.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"
#include "stream/device_tier.h"
#include "stream/slot_pool.h"
#include "stream/trace.h"

namespace ds4::stream {

namespace {
constexpr uint32_t kNone = UINT32_MAX;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr int kRecordTag = 3;  // ReadOp tag = id * 4 + component, or + 3 for a whole record
}  // namespace

struct ExpertProvider::Entry {
  enum St : uint8_t { Absent, Loading, Ready };
  St st = Absent;
  bool prefetched = false;  // installed by a prefetch and not selected since
  bool pf_io = false;       // its reads were submitted as prefetch and are still in flight
  bool waited = false;      // a lease waits for it (demand load or claimed prefetch), still loading
  int64_t t_submit = 0;     // steady_clock ns when its demand reads were submitted (demand only)
  uint8_t pf_kind = 0;
  uint8_t reads_left = 0;
  int pins = 0;
  uint8_t* buf = nullptr;
  uint64_t buf_bytes = 0;
  uint64_t protect_until = 0;  // token count (exclusive)
  uint32_t lead[3] = {0, 0, 0};
};

struct ExpertProvider::AtomicStats {
  std::atomic<uint64_t> tokens{0}, acquires{0}, hits{0}, inflight_hits{0}, misses{0};
  std::atomic<uint64_t> pf_issued[2]{}, pf_useful[2]{}, pf_wasted[2]{}, pf_dropped[2]{};
  std::atomic<uint64_t> evictions{0}, reads{0}, bytes_read{0}, stall_ns{0}, cached_bytes{0};
  std::atomic<uint64_t> demand_batches{0}, demand_behind_prefetch{0}, prefetch_during_demand{0};
  std::atomic<uint64_t> demand_expert_ns{0}, demand_experts{0};
  std::atomic<uint64_t> gpu_hits{0}, gpu_misses{0}, gpu_evictions{0}, h2d_copies{0}, h2d_bytes{0}, host_unpinned{0};
  std::atomic<uint64_t> host_computed{0}, host_computed_bytes{0};
};

std::string ProviderStats::describe() const {
  const uint64_t sel = hits + inflight_hits + misses;
  std::string s = fmt::format(
      "expert cache: {} selections, {} hits + {} in-flight hits ({:.2f}%), {} misses; {} evictions\n"
      "expert reads: {} reads, {:.1f} MiB ({:.2f} MiB/token), stall {:.1f} ms ({:.3f} ms/token)\n",
      sel, hits, inflight_hits, 100.0 * hit_rate(), misses, evictions, reads, bytes_read / 1048576.0,
      tokens ? bytes_read / 1048576.0 / static_cast<double>(tokens) : 0.0, stall_ns / 1e6,
      tokens ? stall_ns / 1e6 / static_cast<double>(tokens) : 0.0);
  if (demand_batches)
    s += fmt::format(
        "demand vs prefetch: {} demand batches with {:.2f} prefetch reads in flight each; {} prefetch reads "
        "submitted while demand was in flight; demand load {:.2f} ms per expert\n",
        demand_batches, static_cast<double>(demand_behind_prefetch) / static_cast<double>(demand_batches),
        prefetch_during_demand, demand_experts ? demand_expert_ns / 1e6 / static_cast<double>(demand_experts) : 0.0);
  const char* names[2] = {"hash", "lookahead"};
  for (int k = 0; k < 2; ++k)
    s += fmt::format("prefetch {}: {} issued, {} useful, {} wasted, {} dropped, {} unresolved\n", names[k],
                     prefetch_issued[k], prefetch_useful[k], prefetch_wasted[k], prefetch_dropped[k],
                     prefetch_unresolved(k));
  s += fmt::format("host cache: {:.1f} of {:.1f} MiB, {} tokens\n", cached_bytes / 1048576.0,
                   budget_bytes / 1048576.0, tokens);
  if (gpu_slots > 0) {
    s += fmt::format(
        "gpu tier: {} hits, {} misses ({:.2f}% hits), {} evictions{}; {} of {} slots of {:.2f} MiB in use "
        "(the host cache above counts the gpu tier's misses only)\n"
        "gpu copies: {} host-to-device, {:.1f} MiB ({:.2f} MiB/token){}\n",
        gpu_hits, gpu_misses, 100.0 * gpu_hit_rate(), gpu_evictions,
        gpu_admission ? fmt::format(", {} copied in as transient (not admitted)", gpu_transient) : "", gpu_used, gpu_slots, gpu_slot_bytes / 1048576.0,
        h2d_copies, h2d_bytes / 1048576.0, tokens ? h2d_bytes / 1048576.0 / static_cast<double>(tokens) : 0.0,
        host_unpinned ? fmt::format(", {} host buffers not page-locked (slower copies)", host_unpinned) : "");
  }
  if (host_compute)
    s += fmt::format("host compute: {} experts computed where they sit in host memory, {:.1f} MiB ({:.2f} MiB/token)\n",
                     host_computed, host_computed_bytes / 1048576.0,
                     tokens ? host_computed_bytes / 1048576.0 / static_cast<double>(tokens) : 0.0);
  return s;
}

uint64_t parse_budget(const std::string& s, const char* flag, int64_t* slots) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) fail("{}: '{}' is not a size (e.g. 8GB, 512MiB) or a slot count", flag, s);
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    fail("{}: '{}' is not a number", flag, s);
  }
  std::string u = s.substr(i);
  for (auto& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (u.empty()) {
    if (s.find('.') != std::string::npos || v < 1) fail("{}: slot count '{}' must be a positive integer", flag, s);
    *slots = static_cast<int64_t>(v);
    return 0;
  }
  double mul = 0;
  if (u == "B") mul = 1;
  else if (u == "KB") mul = 1e3;
  else if (u == "KIB") mul = 1024.0;
  else if (u == "MB") mul = 1e6;
  else if (u == "MIB") mul = 1048576.0;
  else if (u == "GB" || u == "G") mul = 1e9;
  else if (u == "GIB") mul = 1073741824.0;
  else fail("{}: unknown unit '{}' in '{}' (B, KB, KiB, MB, MiB, GB, GiB)", flag, s.substr(i), s);
  *slots = 0;
  return static_cast<uint64_t>(v * mul);
}

// ---- lease ----------------------------------------------------------------------------------

ExpertLease::ExpertLease(ExpertLease&& o) noexcept
    : p_(o.p_), layer_(o.layer_), ready_(std::move(o.ready_)), waiting_(std::move(o.waiting_)),
      deferred_(std::move(o.deferred_)), dev_ready_(std::move(o.dev_ready_)), rows_(std::move(o.rows_)),
      current_(o.current_),
      current_dev_(o.current_dev_), serial_(o.serial_), done_(o.done_), out_(o.out_) {
  o.p_ = nullptr;
}

ExpertLease::~ExpertLease() {
  if (!p_) return;
  unpin_current();
  for (uint32_t id : ready_) p_->unpin(id);
  for (uint32_t id : waiting_) p_->unpin(id);
  for (uint32_t id : dev_ready_) p_->dev_->unpin(id);
}

void ExpertLease::unpin_current() {
  if (current_ != kNone) p_->unpin(current_);
  current_ = kNone;
  // The op reading the device view is queued already; a copy that reuses its slot will be
  // queued after it (one stream, in order).
  if (current_dev_ != kNone) p_->dev_->unpin(current_dev_);
  current_dev_ = kNone;
}

const ExpertLease::Expert* ExpertLease::next() {
  ExpertProvider& p = *p_;
  unpin_current();
  const uint32_t E = static_cast<uint32_t>(p.layout().n_expert);
  if (!dev_ready_.empty()) {  // in device memory already: computed first
    current_dev_ = dev_ready_.back();
    dev_ready_.pop_back();
    out_.id = static_cast<int32_t>(current_dev_ % E);
    out_.host = false;
    out_.gate = p.dev_view(current_dev_, kGate);
    out_.up = p.dev_view(current_dev_, kUp);
    out_.down = p.dev_view(current_dev_, kDown);
    return &out_;
  }
  auto start_deferred = [&] {
    if (p.dev_) p.release_pending(false);
    while (!deferred_.empty()) {
      const uint32_t id = deferred_.back();
      if (!p.start_load(id, false, 0)) break;
      ++p.entries_[id].pins;
      deferred_.pop_back();
      waiting_.push_back(id);
    }
    p.flush();
  };
  for (;;) {
    if (!deferred_.empty()) start_deferred();
    for (size_t i = 0; i < waiting_.size(); ++i)
      if (p.entries_[waiting_[i]].st == ExpertProvider::Entry::Ready) {
        ready_.push_back(waiting_[i]);
        waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
    if (!ready_.empty()) {
      current_ = ready_.back();
      ready_.pop_back();
      out_.id = static_cast<int32_t>(current_ % E);
      // host_compute: a full device tier is not evicted for it; the expert is computed where
      // it sits (header comment), and stays pinned (current_) until the next next(). An expert
      // of many rows is copied as without host compute.
      const bool many_rows = !rows_.empty() && rows_[current_ % E] > p.opt_.host_compute_max_rows;
      const bool copy = p.dev_ && (!p.opt_.host_compute || p.dev_->has_free_slot() || many_rows);
      out_.host = !copy;
      if (p.opt_.host_compute && !copy) {
        ++p.st_->host_computed;
        p.st_->host_computed_bytes += p.entries_[current_].buf_bytes;
      }
      if (copy) {
        p.to_device(current_, serial_);
        current_dev_ = current_;
        out_.gate = p.dev_view(current_, kGate);
        out_.up = p.dev_view(current_, kUp);
        out_.down = p.dev_view(current_, kDown);
      } else {
        out_.gate = p.view(current_, kGate);
        out_.up = p.view(current_, kUp);
        out_.down = p.view(current_, kDown);
      }
      return &out_;
    }
    if (waiting_.empty() && deferred_.empty()) {
      done_ = true;
      return nullptr;
    }
    if (p.io_->in_flight() == 0 && waiting_.empty()) {
      // Host slots held for copies to the device free up once those copies have run.
      if (p.dev_ && p.release_pending(true)) continue;
      // Nothing will free room by itself: every slot is pinned.
      fail("expert cache budget {} bytes is too small: layer {} needs another expert of {} bytes while every "
           "cached expert is pinned",
           p.pool_->budget(), layer_, p.entries_[deferred_.back()].buf_bytes);
    }
    const auto t0 = std::chrono::steady_clock::now();
    p.reap(true);
    p.st_->stall_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
}

bool ExpertLease::may_hand_out_host() const {
  if (!p_ || !p_->dev_ || !p_->opt_.host_compute) return false;
  return !ready_.empty() || !waiting_.empty() || !deferred_.empty();
}

// ---- provider -------------------------------------------------------------------------------

ExpertProvider::~ExpertProvider() {
  detach_device();
  if (io_) {
    ReadDone d;
    while (io_->in_flight() > 0 && io_->reap(d, true)) {
    }
  }
  if (pool_)
    for (auto& e : entries_)
      if (e.buf) pool_->release(e.buf, e.buf_bytes);
}

std::unique_ptr<ExpertProvider> ExpertProvider::open(const gguf::File& f, const ProviderOptions& opt) {
  std::unique_ptr<ExpertProvider> p(new ExpertProvider);
  p->opt_ = opt;
  // DS4_EXPERT_PF_BUDGET=0 (exactly): lookahead guesses are read even when the gap between layers
  // cannot hold them (A/B of the budget: coverage against the demand they delay), for every
  // front end (the engine, the logits dump, stream-bench), as DS4_EXPERT_GPU_ADMIT for the tier.
  if (const char* env = std::getenv("DS4_EXPERT_PF_BUDGET"); env && std::strcmp(env, "0") == 0)
    p->opt_.prefetch_budget = false;
  p->store_ = ExpertStore::open(f, opt.store);
  const ExpertLayout& L = p->store_->layout();
  if (p->opt_.record_reads && !p->store_->packed()) p->opt_.record_reads = false;
  uint64_t max_slot = 0, all = 0;
  for (int64_t il = 0; il < L.n_layer; ++il) {
    const uint64_t b = p->opt_.record_reads ? p->store_->slot_bytes_record(il) : p->store_->slot_bytes_split(il);
    max_slot = std::max(max_slot, b);
    all += b * static_cast<uint64_t>(L.n_expert);
  }
  uint64_t budget = opt.budget_slots > 0 ? static_cast<uint64_t>(opt.budget_slots) * max_slot
                                         : (opt.budget_bytes ? opt.budget_bytes : all);
  if (budget < max_slot)
    fail("expert cache budget {} bytes is below one expert's slot ({} bytes)", budget, max_slot);
  p->max_slot_ = max_slot;
  p->k_ = experts_used_per_token(f);
  p->pool_ = std::make_unique<SlotPool>(budget);
  const size_t n_ids = static_cast<size_t>(L.n_layer * L.n_expert);
  p->policy_ = std::make_unique<EvictionPolicy>(opt.policy, n_ids, opt.decay_tokens, opt.recent_tokens);
  p->entries_.resize(n_ids);
  p->resident_pos_.assign(n_ids, kNone);
  p->pf_layer_.assign(static_cast<size_t>(L.n_layer), 0);
  p->io_ = opt.io_factory ? opt.io_factory() : make_io_engine(opt.io, opt.io_depth, opt.io_threads);
  if (!p->io_) fail("io_uring is unavailable on this machine (use the pread engine)");
  p->st_ = std::make_unique<AtomicStats>();

  // Hash-routed layers: their tables come from the GGUF (validated here, used for prefetch).
  for (int64_t il = 0; il < L.n_layer; ++il) {
    const gguf::TensorInfo* t = f.find_tensor(fmt::format("blk.{}.ffn_gate_tid2eid.weight", il));
    if (!t) break;
    if (t->type != GgmlType::I32 || t->ne.size() != 2)
      fail("{}: tensor {}: expected a 2-D i32 table", f.path(), t->name);
    p->hash_k_ = static_cast<int64_t>(t->ne[0]);
    const auto* d = reinterpret_cast<const int32_t*>(t->data);
    std::vector<int32_t> tab(d, d + t->ne[0] * t->ne[1]);
    for (int32_t e : tab)
      if (e < 0 || e >= L.n_expert) fail("{}: tensor {}: expert id {} out of range", f.path(), t->name, e);
    p->tid2eid_.push_back(std::move(tab));
  }
  if (!opt.trace_path.empty()) {
    p->trace_ = std::make_unique<TraceWriter>(
        opt.trace_path, TraceHeader{L.n_layer, L.n_expert, p->k_, static_cast<int64_t>(p->tid2eid_.size())});
  }
  return p;
}

WeightView ExpertProvider::view(uint32_t id, int c) const {
  const Entry& en = entries_[id];
  const int64_t layer = id / static_cast<uint32_t>(layout().n_expert);
  const ComponentShape& cs = layout().layers[static_cast<size_t>(layer)].comp[static_cast<size_t>(c)];
  return {cs.type, en.buf + en.lead[c], cs.n_in, cs.n_out, cs.row_stride};
}

WeightView ExpertProvider::dev_view(uint32_t id, int c) const {
  const int64_t layer = id / static_cast<uint32_t>(layout().n_expert);
  const ComponentShape& cs = layout().layers[static_cast<size_t>(layer)].comp[static_cast<size_t>(c)];
  return {cs.type, dev_->data(id, dev_lead_[id][static_cast<size_t>(c)]), cs.n_in, cs.n_out, cs.row_stride};
}

void ExpertProvider::to_device(uint32_t id, uint64_t serial) {
  Entry& en = entries_[id];
  // The whole host slot in one copy (the components are adjacent in it; per-expert copies run
  // near the link's rate, ssd-streaming-digest.md §9).
  if (dev_->install(id, en.buf, en.buf_bytes, serial)) ++st_->gpu_evictions;
  dev_lead_[id] = {en.lead[0], en.lead[1], en.lead[2]};
  ++st_->h2d_copies;
  st_->h2d_bytes += en.buf_bytes;
  // The host slot must not be refilled before the copy has read it.
  ++en.pins;
  pending_.emplace_back(id, dev_->slots().fence());
}

bool ExpertProvider::release_pending(bool wait) {
  bool any = false;
  while (!pending_.empty() && dev_->slots().done(pending_.front().second, wait)) {
    unpin(pending_.front().first);
    pending_.pop_front();
    any = true;
  }
  return any;
}

void ExpertProvider::attach_device(std::unique_ptr<DeviceSlots> slots, int64_t n_slots) {
  if (dev_) fail("internal: the device expert tier is attached already");
  if (pool_->allocated() > 0) fail("internal: the device expert tier must be attached before the first acquire");
  if (!slots) fail("internal: device expert tier without device memory");
  auto tier = std::make_unique<DeviceTier>(std::move(slots), entries_.size(), max_slot_, n_slots, opt_.policy,
                                           opt_.decay_tokens, opt_.recent_tokens);
  DeviceSlots* s = &tier->slots();
  dev_lead_.assign(entries_.size(), {0, 0, 0});
  // Every host buffer is page-locked when made, so copies from it are asynchronous DMA.
  pool_->set_hooks(
      [this, s](uint8_t* p, uint64_t n) {
        if (s->pin_host(p, n)) pinned_.insert(p);
        else ++st_->host_unpinned;
      },
      [this, s](uint8_t* p) {
        if (pinned_.erase(p)) s->unpin_host(p);
      });
  dev_ = std::move(tier);
}

void ExpertProvider::detach_device() noexcept {
  if (!dev_) return;
  DeviceSlots& s = dev_->slots();
  try {
    s.done(s.fence(), true);
  } catch (...) {  // a failed stream: nothing more will run on it
  }
  for (const auto& [id, f] : pending_) unpin(id);
  pending_.clear();
  pool_->set_hooks({}, {});
  for (uint8_t* p : pinned_) s.unpin_host(p);
  pinned_.clear();
  dev_.reset();
}

void ExpertProvider::unpin(uint32_t id) {
  Entry& en = entries_[id];
  if (en.pins > 0) --en.pins;
}

bool ExpertProvider::evict_one(bool allow_protected) {
  // With the gpu tier's admission, the experts it holds cached go first: the tiers then hold
  // mostly different experts (device_tier.h).
  const bool exclusive = dev_ && dev_->admission();
  uint32_t victim = kNone;
  bool victim_dup = false;
  for (uint32_t id : resident_) {
    const Entry& en = entries_[id];
    if (en.st != Entry::Ready || en.pins > 0) continue;
    if (!allow_protected && opt_.protect && en.protect_until > tokens_) continue;
    const bool dup = exclusive && dev_->cached(id);
    if (victim == kNone || (dup && !victim_dup) || (dup == victim_dup && policy_->before(id, victim))) {
      victim = id;
      victim_dup = dup;
    }
  }
  if (victim == kNone) return false;
  Entry& en = entries_[victim];
  if (en.prefetched) ++st_->pf_wasted[en.pf_kind];
  pool_->release(en.buf, en.buf_bytes);
  st_->cached_bytes -= en.buf_bytes;
  en = Entry{};
  const uint32_t pos = resident_pos_[victim];
  resident_[pos] = resident_.back();
  resident_pos_[resident_[pos]] = pos;
  resident_.pop_back();
  resident_pos_[victim] = kNone;
  ++st_->evictions;
  return true;
}

bool ExpertProvider::start_load(uint32_t id, bool prefetch, int kind) {
  Entry& en = entries_[id];
  const int64_t E = layout().n_expert;
  const int64_t layer = id / static_cast<uint32_t>(E), e = id % static_cast<uint32_t>(E);
  const uint64_t bytes = opt_.record_reads ? store_->slot_bytes_record(layer) : store_->slot_bytes_split(layer);
  uint8_t* buf = nullptr;
  for (;;) {
    buf = pool_->try_get(bytes);
    if (buf) break;
    // Demand may evict protected prefetches when nothing else can go; prefetch may not.
    if (!evict_one(false) && (prefetch || !evict_one(true))) {
      en.buf_bytes = bytes;  // for the error message of a stuck lease
      return false;
    }
  }
  en.buf = buf;
  en.buf_bytes = bytes;
  en.st = Entry::Loading;
  en.prefetched = prefetch;
  en.pf_kind = static_cast<uint8_t>(kind);
  if (prefetch) policy_->stamp(id, ++clock_);
  if (prefetch && opt_.protect) en.protect_until = tokens_ + static_cast<uint64_t>(opt_.protect_tokens);
  const int fd = store_->fd();
  if (opt_.record_reads) {
    ComponentRead r = store_->record(layer, e);
    for (int c = 0; c < 3; ++c) en.lead[c] = r.lead + static_cast<uint32_t>(store_->record_comp_offset(layer, c));
    batch_.push_back({fd, r.offset, r.len, buf, id * 4ull + kRecordTag, prefetch});
    en.reads_left = 1;
  } else {
    uint64_t at = 0;
    for (int c = 0; c < 3; ++c) {
      ComponentRead r = store_->component(layer, e, c);
      en.lead[c] = static_cast<uint32_t>(at + r.lead);
      batch_.push_back({fd, r.offset, r.len, buf + at, id * 4ull + static_cast<uint64_t>(c), prefetch});
      at += r.len;
    }
    en.reads_left = 3;
  }
  resident_pos_[id] = static_cast<uint32_t>(resident_.size());
  resident_.push_back(id);
  st_->cached_bytes += bytes;
  const unsigned n_reads = en.reads_left;
  if (prefetch) {
    ++prefetch_inflight_;
    ++pf_layer_[static_cast<size_t>(layer)];
    ++st_->pf_issued[kind];
    en.pf_io = true;
    pf_reads_ += n_reads;
    if (dem_reads_ > 0) st_->prefetch_during_demand += n_reads;
  } else {
    en.waited = true;
    en.t_submit = now_ns();
    if (dem_reads_ == 0) {  // a new stretch of demand reads: its rate feeds the lookahead budget
      dem_t0_ = en.t_submit;
      dem_bytes_ = 0;
      dem_mixed_ = pf_reads_ > 0;
    }
    dem_reads_ += n_reads;
    dem_bytes_ += bytes;
  }
  return true;
}

void ExpertProvider::flush() {
  if (batch_.empty()) return;
  io_->submit(batch_);
  batch_.clear();
}

void ExpertProvider::handle(const ReadDone& d) {
  const uint32_t id = static_cast<uint32_t>(d.tag / 4);
  const int c = static_cast<int>(d.tag % 4);
  Entry& en = entries_[id];
  const int64_t E = layout().n_expert;
  const int64_t layer = id / static_cast<uint32_t>(E), e = id % static_cast<uint32_t>(E);
  const ComponentRead r = c == kRecordTag ? store_->record(layer, e) : store_->component(layer, e, c);
  if (d.result < 0)
    fail("{}: reading expert {} of layer {} at offset {}: {}", store_->source_path(), e, layer, r.offset,
         std::strerror(static_cast<int>(-d.result)));
  if (static_cast<uint64_t>(d.result) < r.need)
    fail("{}: reading expert {} of layer {} at offset {}: got {} of {} bytes (file truncated?)", store_->source_path(),
         e, layer, r.offset, d.result, r.need);
  ++st_->reads;
  st_->bytes_read += static_cast<uint64_t>(d.result);
  if (en.pf_io && pf_reads_ > 0) --pf_reads_;
  if (en.waited && dem_reads_ > 0 && --dem_reads_ == 0) {
    idle_from_ns_ = now_ns();  // no demand on the disk from here to the next acquire's
    if (!dem_mixed_ && dem_bytes_ > 0) {
      // The demand reads alone on the disk: their rate is what a guess would get in a gap.
      const double r = static_cast<double>(dem_bytes_) / static_cast<double>(std::max<int64_t>(1, idle_from_ns_ - dem_t0_));
      bytes_per_ns_ = bytes_per_ns_ < 0 ? r : 0.75 * bytes_per_ns_ + 0.25 * r;
    }
  }
  if (--en.reads_left > 0) return;
  if (en.pf_io) {
    if (prefetch_inflight_ > 0) --prefetch_inflight_;
    if (pf_layer_[static_cast<size_t>(layer)] > 0) --pf_layer_[static_cast<size_t>(layer)];
  }
  en.pf_io = false;
  if (en.waited && en.t_submit) {
    st_->demand_expert_ns += static_cast<uint64_t>(now_ns() - en.t_submit);
    ++st_->demand_experts;
  }
  en.waited = false;
  if (opt_.store.verify_reads &&
      !store_->verify(layer, e, en.buf + en.lead[0], en.buf + en.lead[1], en.buf + en.lead[2]))
    fail("{}: expert {} of layer {}: checksum mismatch (file damaged or changed)", store_->source_path(), e, layer);
  en.st = Entry::Ready;
}

bool ExpertProvider::reap(bool block, bool pump) {
  ReadDone d;
  bool any = false;
  while (io_->reap(d, block && !any)) {
    any = true;
    handle(d);
  }
  if (pump) pump_prefetch();
  return any;
}

bool ExpertProvider::pf_earlier_in_flight(int64_t layer) const {
  for (int64_t l = 0; l < layer && l < static_cast<int64_t>(pf_layer_.size()); ++l)
    if (pf_layer_[static_cast<size_t>(l)] > 0) return true;
  return false;
}

void ExpertProvider::pump_prefetch() {
  // Demand first (header comment): a read a lease waits for shares the disk with nothing we
  // could have held back. Measured before this gate (stream-bench, lookahead): 13 prefetch reads
  // per token went in while demand waited, and stalls grew.
  if (dem_reads_ > 0) return;
  std::vector<Queued> keep;
  for (const Queued& q : prefetch_queue_) {
    if (entries_[q.id].st != Entry::Absent) continue;  // cached or on its way already
    // Earliest layer first: a later layer's reads would delay the ones needed sooner.
    if (prefetch_inflight_ >= opt_.prefetch_inflight || pf_earlier_in_flight(q.layer)) {
      keep.push_back(q);
      continue;
    }
    const int64_t layer = q.id / static_cast<uint32_t>(layout().n_expert);
    const double bytes = static_cast<double>(opt_.record_reads ? store_->slot_bytes_record(layer)
                                                               : store_->slot_bytes_split(layer));
    // Hash-layer experts are the next layers' demand itself (certain), so only guesses are
    // budgeted: what does not fit the gap would stand in front of the next demand.
    // A guess the gap reads only in part still pays when right (the demand waits for the rest
    // only) and costs the unread rest when wrong (it stands in front of the demand), so it goes
    // in when its read share of the gap beats the miss probability: gap >= (1 - p) x bytes, p
    // the guesses' measured precision (useful / issued, 0.5 before any).
    const bool budgeted = q.kind == kPrefetchLookahead && opt_.prefetch_budget;
    const double p = (static_cast<double>(st_->pf_useful[kPrefetchLookahead]) + 1.0) /
                     (static_cast<double>(st_->pf_issued[kPrefetchLookahead]) + 2.0);
    if (budgeted && budget_left_ < (1.0 - std::min(p, 1.0)) * bytes) {
      ++st_->pf_dropped[q.kind];
      continue;
    }
    if (!start_load(q.id, true, q.kind)) ++st_->pf_dropped[q.kind];
    else if (budgeted) budget_left_ -= bytes;
  }
  prefetch_queue_.swap(keep);
  flush();
}

void ExpertProvider::begin_tokens(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    policy_->next_token();
    if (dev_) dev_->next_token();
  }
  tokens_ += tokens.size();
  st_->tokens += tokens.size();
  pos_cur_ = pos_;
  pos_ += static_cast<int64_t>(tokens.size());
  if (opt_.prefetch_hash && tokens.size() == 1) {
    const int32_t t = tokens[0];
    for (size_t il = 0; il < tid2eid_.size(); ++il) {
      const auto& tab = tid2eid_[il];
      if (t < 0 || static_cast<size_t>(t + 1) * static_cast<size_t>(hash_k_) > tab.size()) continue;
      hint(static_cast<int64_t>(il), std::span(tab).subspan(static_cast<size_t>(t) * static_cast<size_t>(hash_k_),
                                                             static_cast<size_t>(hash_k_)),
           kPrefetchHash);
    }
  }
}

void ExpertProvider::hint(int64_t layer, std::span<const int32_t> experts, PrefetchKind kind) {
  if (kind == kPrefetchLookahead && trace_) trace_->hint(pos_cur_, layer, experts);
  if (kind == kPrefetchLookahead && !opt_.prefetch_lookahead) return;
  if (layer < 0 || layer >= layout().n_layer) return;
  const uint32_t base = static_cast<uint32_t>(layer * layout().n_expert);
  for (int32_t e : experts) {
    if (e < 0 || e >= layout().n_expert) continue;
    const uint32_t id = base + static_cast<uint32_t>(e);
    if (dev_ && dev_->resident(id)) continue;  // already where it is computed
    Entry& en = entries_[id];
    if (en.st != Entry::Absent) {
      if (opt_.protect) en.protect_until = std::max(en.protect_until, tokens_ + static_cast<uint64_t>(opt_.protect_tokens));
      continue;
    }
    prefetch_queue_.push_back({id, layer, kind});
  }
  reap(false);
}

ExpertLease ExpertProvider::acquire(int64_t layer, std::span<const int32_t> routing, int64_t k) {
  const ExpertLayout& L = layout();
  if (layer < 0 || layer >= L.n_layer) fail("internal: expert layer {} outside [0, {})", layer, L.n_layer);
  if (k <= 0 || routing.size() % static_cast<size_t>(k) != 0)
    fail("internal: routing of {} ids is not a whole number of rows of {}", routing.size(), k);
  ++st_->acquires;
  if (idle_from_ns_ != 0) {  // the disk's gap: no demand read since the last one completed
    const double g = static_cast<double>(now_ns() - idle_from_ns_);
    gap_ns_ = gap_ns_ < 0 ? g : 0.75 * gap_ns_ + 0.25 * g;
    idle_from_ns_ = 0;
  }
  // Guesses for layers decode has reached are stale now.
  std::erase_if(prefetch_queue_, [&](const Queued& q) {
    if (q.layer > layer) return false;
    ++st_->pf_dropped[q.kind];
    return true;
  });
  if (trace_)
    for (size_t t = 0; t * static_cast<size_t>(k) < routing.size(); ++t)
      trace_->routing(pos_cur_ + static_cast<int64_t>(t), layer, routing.subspan(t * static_cast<size_t>(k), static_cast<size_t>(k)));
  std::vector<int32_t> uniq(routing.begin(), routing.end());
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  ExpertLease lease(this, layer);
  const uint32_t base = static_cast<uint32_t>(layer * L.n_expert);
  for (int32_t e : uniq)
    if (e < 0 || e >= L.n_expert) fail("internal: expert id {} outside [0, {}) at layer {}", e, L.n_expert, layer);
  if (dev_) {
    // Device tier first: its hits never reach the host tier, which gets the rest.
    release_pending(false);
    lease.serial_ = dev_->begin_lease();
    if (opt_.host_compute) {
      lease.rows_.assign(static_cast<size_t>(L.n_expert), 0);
      for (int32_t e : routing) ++lease.rows_[static_cast<size_t>(e)];
    }
    size_t keep = 0;
    for (int32_t e : uniq) {
      const uint32_t id = base + static_cast<uint32_t>(e);
      dev_->touch(id, ++clock_);
      if (dev_->resident(id)) {
        dev_->hit(id, lease.serial_);
        lease.dev_ready_.push_back(id);
        ++st_->gpu_hits;
      } else {
        ++st_->gpu_misses;
        uniq[keep++] = e;
      }
    }
    uniq.resize(keep);
  }
  for (int32_t e : uniq) policy_->touch(base + static_cast<uint32_t>(e), ++clock_);
  reap(false, false);  // completions only: no prefetch goes in before this layer's demand
  // Cached experts first (they are computed while the misses load).
  for (auto it = uniq.rbegin(); it != uniq.rend(); ++it) {
    const uint32_t id = base + static_cast<uint32_t>(*it);
    Entry& en = entries_[id];
    if (en.st == Entry::Absent) continue;
    if (en.prefetched) {
      ++st_->pf_useful[en.pf_kind];
      en.prefetched = false;
      if (en.st == Entry::Loading) {  // its remaining reads are now waited for (and still on the disk)
        en.waited = true;
        if (dem_reads_ == 0) dem_bytes_ = 0;
        dem_mixed_ = true;  // not a clean rate sample
        dem_reads_ += en.reads_left;
      }
    }
    ++en.pins;
    if (en.st == Entry::Ready) {
      ++st_->hits;
      lease.ready_.push_back(id);
    } else {
      ++st_->inflight_hits;
      lease.waiting_.push_back(id);
    }
  }
  for (int32_t e : uniq) {
    const uint32_t id = base + static_cast<uint32_t>(e);
    Entry& en = entries_[id];
    if (en.st != Entry::Absent || en.pins > 0) continue;
    ++st_->misses;
    en.pins = 1;
    if (start_load(id, false, 0)) {
      lease.waiting_.push_back(id);
    } else {
      en.pins = 0;
      lease.deferred_.push_back(id);
    }
  }
  if (!batch_.empty()) {
    ++st_->demand_batches;
    st_->demand_behind_prefetch += pf_reads_;
  }
  flush();
  if (dem_reads_ == 0) idle_from_ns_ = now_ns();  // no demand this layer: the gap runs from here
  // The guesses hinted during this layer get what the disk reads in one gap (none measured: no limit).
  budget_left_ = gap_ns_ >= 0 && bytes_per_ns_ >= 0 ? gap_ns_ * bytes_per_ns_ : 1e300;
  pump_prefetch();  // gated while this layer's demand is in flight
  return lease;
}

ProviderStats ExpertProvider::stats() const {
  ProviderStats s;
  const AtomicStats& a = *st_;
  s.tokens = a.tokens, s.acquires = a.acquires, s.hits = a.hits, s.inflight_hits = a.inflight_hits;
  s.misses = a.misses;
  for (int k = 0; k < 2; ++k) {
    s.prefetch_issued[k] = a.pf_issued[k], s.prefetch_useful[k] = a.pf_useful[k];
    s.prefetch_wasted[k] = a.pf_wasted[k], s.prefetch_dropped[k] = a.pf_dropped[k];
  }
  s.evictions = a.evictions, s.reads = a.reads, s.bytes_read = a.bytes_read, s.stall_ns = a.stall_ns;
  s.demand_batches = a.demand_batches, s.demand_behind_prefetch = a.demand_behind_prefetch;
  s.prefetch_during_demand = a.prefetch_during_demand;
  s.demand_expert_ns = a.demand_expert_ns, s.demand_experts = a.demand_experts;
  s.budget_bytes = pool_->budget();
  s.cached_bytes = a.cached_bytes;
  s.gpu_hits = a.gpu_hits, s.gpu_misses = a.gpu_misses, s.gpu_evictions = a.gpu_evictions;
  s.h2d_copies = a.h2d_copies, s.h2d_bytes = a.h2d_bytes, s.host_unpinned = a.host_unpinned;
  s.host_computed = a.host_computed, s.host_computed_bytes = a.host_computed_bytes;
  s.host_compute = opt_.host_compute;
  if (const DeviceTier* d = dev_.get()) {
    s.gpu_slots = d->n_slots();
    s.gpu_used = d->used();
    s.gpu_slot_bytes = d->slot_bytes();
    s.gpu_admission = d->admission();
    s.gpu_transient = d->transient_installs();
  }
  return s;
}

}  // namespace ds4::stream
