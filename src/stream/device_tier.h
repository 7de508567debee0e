#pragma once
// The device tier of the expert cache: routed experts held in device (GPU) memory, above the
// pinned host cache of provider.h. A GPU-tier miss is served from the host tier (which reads it
// from the store on its own miss) and copied into a device slot by an asynchronous host-to-device
// copy; the model then gets views into device memory, which the backend's ops take as weights in
// place (compute::Backend::alloc_weight_slots).
//
// Bookkeeping only: slots, eviction (EvictionPolicy, the host tier's policy kind) and pins. The
// memory operations go through DeviceSlots, which backend_device_slots() implements over any
// compute::Backend with device memory (the CUDA backend); a test can implement it over host
// memory to check the protocol on a machine without a GPU.
//
// Admission (hot policy): once the tier is full, an expert displaces the cached one the policy
// would evict first (outside the recency segment and the layer being computed when it can: the
// coldest there) only when its decayed selection count is more than twice as high; otherwise it
// is copied in as transient, in a slot that goes before any cached one (transient slots are
// reused while the cached set stays). So the tier settles on the hottest experts instead of
// turning over with every miss, and the host tier (provider.h) evicts its copies of the tier's
// cached experts first: the two tiers hold mostly different experts. The LRU policy admits
// every expert (the plain baseline), as does DS4_EXPERT_GPU_ADMIT=0 (that exact value).
//
// Why copies are safe without more synchronization: the backend runs copies and ops in order on
// one stream, so a copy into a slot queued after the op that read the slot's previous expert
// runs after it. The one hazard is on the host side: the host slot a copy reads from must not be
// reused (evicted and refilled by a read) before the copy has run. The provider keeps that host
// slot pinned until a fence made after the copy has passed.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stream/policy.h"

namespace ds4::compute {
class Backend;
}

namespace ds4::stream {

// Device memory for expert slots and the copies into it (see compute::Backend's device-tier
// section for the contract of each call).
class DeviceSlots {
 public:
  virtual ~DeviceSlots() = default;
  virtual uint8_t* alloc(uint64_t bytes) = 0;  // usable as weights in place
  virtual void release(uint8_t* p) = 0;
  virtual bool pin_host(void* p, uint64_t bytes) = 0;
  virtual void unpin_host(void* p) = 0;
  virtual void upload(uint8_t* dst, const uint8_t* host_src, uint64_t bytes) = 0;  // asynchronous
  virtual uint64_t fence() = 0;
  virtual bool done(uint64_t fence, bool wait) = 0;
  virtual uint64_t free_bytes() = 0;
};

// The backend's device memory as DeviceSlots; null when `be` has none (the CPU backend). `be`
// must outlive the result.
std::unique_ptr<DeviceSlots> backend_device_slots(compute::Backend& be);

class DeviceTier {
 public:
  // n_ids = layers x experts; n_slots slots of slot_bytes each (the largest host slot, so any
  // layer's expert fits any slot).
  DeviceTier(std::unique_ptr<DeviceSlots> dev, size_t n_ids, uint64_t slot_bytes, int64_t n_slots, PolicyKind policy,
             int decay_tokens, int recent_tokens);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  DeviceSlots& slots() { return *dev_; }
  bool resident(uint32_t id) const { return entries_[id].slot >= 0; }
  // Resident and admitted (not transient): the host tier need not keep a copy.
  bool cached(uint32_t id) const { return entries_[id].slot >= 0 && !entries_[id].transient; }
  bool admission() const { return admit_; }
  uint64_t transient_installs() const { return transient_installs_.load(std::memory_order_relaxed); }
  // Device address of component bytes at `offset` inside id's slot (resident only).
  const uint8_t* data(uint32_t id, uint64_t offset) const {
    return arena_ + static_cast<uint64_t>(entries_[id].slot) * stride_ + offset;
  }
  void touch(uint32_t id, uint64_t now) { policy_.touch(id, now); }
  void next_token() { policy_.next_token(); }
  // A new acquire (layer): experts selected by it are evicted last.
  uint64_t begin_lease() { return ++serial_; }
  // A hit of the current lease: pinned until unpin() (the view is in use).
  void hit(uint32_t id, uint64_t serial) {
    ++entries_[id].pins;
    entries_[id].serial = serial;
  }
  void unpin(uint32_t id) {
    if (entries_[id].pins > 0) --entries_[id].pins;
  }
  // Copies `bytes` of host memory (pinned, unchanged until a later fence passes) into a slot for
  // id, evicting the best victim: unpinned, not selected by lease `serial` if any other can go,
  // then by the policy (with admission: transient entries first, and a cached one only for a
  // hotter expert or when no transient can go). The entry is resident (and pinned) on return;
  // the copy is queued. Returns whether an expert was evicted for it.
  bool install(uint32_t id, const uint8_t* host, uint64_t bytes, uint64_t serial);

  int64_t n_slots() const { return static_cast<int64_t>(owner_.size()); }
  uint64_t slot_bytes() const { return stride_; }
  // Slots holding an expert (the counters live in the provider's stats).
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  // A slot holds no expert: install() would evict nothing.
  bool has_free_slot() const { return !free_.empty(); }

 private:
  struct Entry {
    int32_t slot = -1;
    int pins = 0;
    uint64_t serial = 0;  // the last lease that selected it
    bool transient = false;  // installed without admission: the first to go
  };
  // The best unpinned victim among the cached and among the transient entries (one scan);
  // UINT32_MAX where none.
  struct Victims {
    uint32_t cached, transient;
  };
  Victims best_victims(uint64_t serial) const;
  std::unique_ptr<DeviceSlots> dev_;
  uint8_t* arena_ = nullptr;
  uint64_t stride_ = 0;
  std::vector<Entry> entries_;
  std::vector<uint32_t> owner_;  // per slot: its entry id, or UINT32_MAX when free
  std::vector<int32_t> free_;    // free slots
  EvictionPolicy policy_;
  uint64_t serial_ = 0;
  bool admit_ = false;  // admission (header comment)
  std::atomic<int64_t> used_{0};  // read by stats() from any thread
  std::atomic<uint64_t> transient_installs_{0};
};

}  // namespace ds4::stream
