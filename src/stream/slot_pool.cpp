#include "stream/slot_pool.h"

#include <cstdlib>
#include <new>

namespace ds4::stream {

SlotPool::~SlotPool() {
  for (auto& [sz, v] : free_)
    for (uint8_t* p : v) free_buffer(p);
}

void SlotPool::free_buffer(uint8_t* p) {
  if (on_free_) on_free_(p);
  std::free(p);
}

uint8_t* SlotPool::try_get(uint64_t bytes) {
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    uint8_t* p = it->second.back();
    it->second.pop_back();
    in_use_ += bytes;
    return p;
  }
  // Drop free buffers of other sizes until the new one fits.
  for (auto f = free_.begin(); allocated_ + bytes > budget_ && f != free_.end(); ++f)
    while (!f->second.empty() && allocated_ + bytes > budget_) {
      free_buffer(f->second.back());
      f->second.pop_back();
      allocated_ -= f->first;
    }
  if (allocated_ + bytes > budget_) return nullptr;
  const uint64_t rounded = (bytes + align_ - 1) / align_ * align_;
  void* p = std::aligned_alloc(align_, rounded);
  if (!p) throw std::bad_alloc();
  if (on_alloc_) {
    try {
      on_alloc_(static_cast<uint8_t*>(p), rounded);
    } catch (...) {
      std::free(p);
      throw;
    }
  }
  allocated_ += bytes;
  in_use_ += bytes;
  return static_cast<uint8_t*>(p);
}

void SlotPool::release(uint8_t* p, uint64_t bytes) {
  free_[bytes].push_back(p);
  in_use_ -= bytes;
}

}  // namespace ds4::stream
