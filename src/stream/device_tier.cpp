#include "stream/device_tier.h"

#include <cstdlib>
#include <cstring>

#include "compute/backend.h"
#include "core/error.h"

namespace ds4::stream {

namespace {

constexpr uint32_t kFree = UINT32_MAX;

class BackendSlots final : public DeviceSlots {
 public:
  explicit BackendSlots(compute::Backend& be) : be_(be) {}
  uint8_t* alloc(uint64_t bytes) override { return be_.alloc_weight_slots(bytes, "device expert cache"); }
  void release(uint8_t* p) override { be_.release_weight_slots(p); }
  bool pin_host(void* p, uint64_t bytes) override { return be_.pin_host(p, bytes); }
  void unpin_host(void* p) override { be_.unpin_host(p); }
  void upload(uint8_t* dst, const uint8_t* src, uint64_t bytes) override { be_.upload_async(dst, src, bytes); }
  uint64_t fence() override { return be_.fence(); }
  bool done(uint64_t f, bool wait) override { return be_.fence_done(f, wait); }
  uint64_t free_bytes() override { return be_.device_free_bytes(); }

 private:
  compute::Backend& be_;
};

}  // namespace

std::unique_ptr<DeviceSlots> backend_device_slots(compute::Backend& be) {
  if (!be.device_memory()) return nullptr;
  return std::make_unique<BackendSlots>(be);
}

DeviceTier::DeviceTier(std::unique_ptr<DeviceSlots> dev, size_t n_ids, uint64_t slot_bytes, int64_t n_slots,
                       PolicyKind policy, int decay_tokens, int recent_tokens)
    : dev_(std::move(dev)), entries_(n_ids), policy_(policy, n_ids, decay_tokens, recent_tokens) {
  if (!dev_) fail("internal: device expert cache without device memory");
  const char* env = std::getenv("DS4_EXPERT_GPU_ADMIT");
  admit_ = policy == PolicyKind::Hot && !(env && std::strcmp(env, "0") == 0);
  if (n_slots < 1 || slot_bytes == 0) fail("internal: device expert cache of {} slots of {} bytes", n_slots, slot_bytes);
  // 256-byte slot starts keep each view's alignment that of its host slot (4 KiB-aligned
  // buffers, component offsets inside them): the kernels' vector loads see the same addresses mod 256.
  stride_ = (slot_bytes + 255) / 256 * 256;
  arena_ = dev_->alloc(stride_ * static_cast<uint64_t>(n_slots));
  owner_.assign(static_cast<size_t>(n_slots), kFree);
  free_.reserve(static_cast<size_t>(n_slots));
  for (int64_t s = n_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

DeviceTier::~DeviceTier() {
  // The arena may still be read by queued ops or written by queued copies.
  try {
    dev_->done(dev_->fence(), true);
  } catch (...) {
  }
  dev_->release(arena_);
}

DeviceTier::Victims DeviceTier::best_victims(uint64_t serial) const {
  // Linear scan, as the host tier's: a few thousand slots per miss is cheap next to a copy.
  uint32_t victim[2] = {kFree, kFree};  // [transient]
  bool victim_now[2] = {true, true};
  for (uint32_t o : owner_) {
    if (o == kFree) continue;
    const Entry& e = entries_[o];
    if (e.pins > 0) continue;
    const int t = e.transient ? 1 : 0;
    const bool now = e.serial == serial;  // selected by this layer (and computed already)
    if (victim[t] == kFree || (victim_now[t] && !now) || (now == victim_now[t] && policy_.before(o, victim[t]))) {
      victim[t] = o;
      victim_now[t] = now;
    }
  }
  return {victim[0], victim[1]};
}

bool DeviceTier::install(uint32_t id, const uint8_t* host, uint64_t bytes, uint64_t serial) {
  Entry& en = entries_[id];
  if (bytes > stride_) fail("internal: device expert cache: {} bytes do not fit a slot of {}", bytes, stride_);
  if (en.slot >= 0) fail("internal: device expert cache: entry {} installed twice", id);
  bool evicted = false, transient = false;
  int32_t slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    const Victims v = best_victims(serial);
    uint32_t victim = v.cached;  // without admission every entry is cached
    if (admit_) {
      // Admitted: more than twice as hot (decayed count; the key is its log2) as the cached
      // expert it displaces, the policy's victim (outside the recency segment and this layer
      // when it can be). Offline, Zipf routing at the consumer shares
      // (StreamDeviceTier.AdmissionReadsFewerExpertsUnderZipfRouting), store reads against
      // admitting every miss: 0.90 for any hotter expert, 0.76 at twice, 0.74 at four times,
      // 0.72 for a tier that never replaces (no room left to follow a change of topic).
      const bool admitted = v.cached != kFree && policy_.key(id) > policy_.key(v.cached) + 1.0;
      transient = !admitted;
      if (!admitted && v.transient != kFree) victim = v.transient;
    }
    if (victim == kFree)
      fail("device expert cache: every one of its {} slots is in use by the layer being computed", owner_.size());
    slot = entries_[victim].slot;
    entries_[victim].slot = -1;
    entries_[victim].transient = false;
    used_.fetch_sub(1, std::memory_order_relaxed);
    evicted = true;
  }
  if (transient) transient_installs_.fetch_add(1, std::memory_order_relaxed);
  owner_[static_cast<size_t>(slot)] = id;
  en.slot = slot;
  en.transient = transient;
  en.pins = 1;
  en.serial = serial;
  used_.fetch_add(1, std::memory_order_relaxed);
  dev_->upload(arena_ + static_cast<uint64_t>(slot) * stride_, host, bytes);
  return evicted;
}

}  // namespace ds4::stream
