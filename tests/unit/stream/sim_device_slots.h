#pragma once
// SimSlots: stream::DeviceSlots over host memory, for testing the device tier (device_tier.h)
// on a machine without a GPU. Copies are done at once (the CPU backend reads the slots right
// away) but count as in flight until their fence passes, and a fence passes late: only on
// every third poll, one at a time, unless waited for. When a copy's fence passes, its host
// source must hash as it did when the copy was queued (else the host slot was refilled while
// the copy could still be reading it: a violation), and every source must lie in page-locked
// memory.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "stream/device_tier.h"

namespace ds4::test {

struct SimLog {
  uint64_t uploads = 0, violations = 0, unpinned_sources = 0, late_polls = 0;
  int64_t pinned_now = 0, pins_ever = 0;
  std::vector<std::pair<const uint8_t*, uint64_t>> arenas;  // what alloc handed out
  bool in_arena(const uint8_t* p, uint64_t n) const {
    for (auto [a, b] : arenas)
      if (p >= a && p + n <= a + b) return true;
    return false;
  }
};

class SimSlots final : public stream::DeviceSlots {
 public:
  explicit SimSlots(SimLog* log) : log_(log) {}
  uint8_t* alloc(uint64_t bytes) override {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
    std::memset(p, 0xA5, bytes);  // never the file's bytes by accident
    log_->arenas.emplace_back(p, bytes);
    return p;
  }
  void release(uint8_t* p) override { std::free(p); }
  bool pin_host(void* p, uint64_t bytes) override {
    pinned_[static_cast<uint8_t*>(p)] = bytes;
    ++log_->pinned_now, ++log_->pins_ever;
    return true;
  }
  void unpin_host(void* p) override {
    EXPECT_EQ(pinned_.erase(static_cast<uint8_t*>(p)), 1u) << "unpin of a buffer never pinned";
    --log_->pinned_now;
  }
  void upload(uint8_t* dst, const uint8_t* src, uint64_t bytes) override {
    bool pinned = false;
    for (auto& [p, n] : pinned_)
      if (src >= p && src + bytes <= p + n) pinned = true;
    if (!pinned) ++log_->unpinned_sources;
    std::memcpy(dst, src, bytes);  // the CPU ops read it right away; the check below is the point
    inflight_.push_back({made_ + 1, src, bytes, XXH64(src, bytes, 0)});
    ++log_->uploads;
  }
  uint64_t fence() override { return ++made_; }
  bool done(uint64_t f, bool wait) override {
    // Without wait, a fence passes only on every third poll, one at a time: copies stay in
    // flight across acquires, so host slots stay held and the provider must cope.
    if (wait) pass(f);
    else if (++polls_ % 3 == 0) pass(std::min(f, passed_ + 1));
    else ++log_->late_polls;
    return f <= passed_;
  }
  uint64_t free_bytes() override { return 1ull << 40; }
  ~SimSlots() override { pass(made_); }

 private:
  struct Copy {
    uint64_t fence;
    const uint8_t* src;
    uint64_t bytes, hash;
  };
  void pass(uint64_t f) {
    passed_ = std::max(passed_, std::min(f, made_));
    while (!inflight_.empty() && inflight_.front().fence <= passed_) {
      const Copy& c = inflight_.front();
      if (XXH64(c.src, c.bytes, 0) != c.hash) ++log_->violations;  // the host slot changed under the copy
      inflight_.erase(inflight_.begin());
    }
  }
  SimLog* log_;
  std::map<uint8_t*, uint64_t> pinned_;
  std::vector<Copy> inflight_;
  uint64_t made_ = 0, passed_ = 0, polls_ = 0;
};

}  // namespace ds4::test
