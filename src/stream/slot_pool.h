#pragma once
// Aligned host buffers for cached experts under a byte budget. Buffers of a size that was
// freed are reused before anything new is allocated; every buffer, in use or free, counts
// against the budget, so the cache never holds more than the budget.
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace ds4::stream {

class SlotPool {
 public:
  explicit SlotPool(uint64_t budget_bytes, uint64_t align = 4096) : budget_(budget_bytes), align_(align) {}
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  uint64_t budget() const { return budget_; }
  uint64_t allocated() const { return allocated_; }  // in use + free list
  uint64_t in_use() const { return in_use_; }

  // A buffer of exactly `bytes`, or nullptr when the budget does not allow one without
  // evicting (the caller evicts with release() and tries again). Frees free-list buffers of
  // other sizes when that makes room.
  uint8_t* try_get(uint64_t bytes);
  void release(uint8_t* p, uint64_t bytes);  // back to the free list

  // Called with every buffer (and its allocated size) right after it is allocated, and right
  // before it is freed: the provider page-locks its buffers for the device tier's copies.
  // Either may be empty.
  void set_hooks(std::function<void(uint8_t*, uint64_t)> on_alloc, std::function<void(uint8_t*)> on_free) {
    on_alloc_ = std::move(on_alloc);
    on_free_ = std::move(on_free);
  }

 private:
  void free_buffer(uint8_t* p);
  uint64_t budget_, align_;
  std::function<void(uint8_t*, uint64_t)> on_alloc_;
  std::function<void(uint8_t*)> on_free_;
  uint64_t allocated_ = 0, in_use_ = 0;
  std::map<uint64_t, std::vector<uint8_t*>> free_;
};

}  // namespace ds4::stream
