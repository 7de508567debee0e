#pragma once
// Reuse of device blocks on one stream without a CUDA call: a decode step allocates and frees
// the same few hundred temporaries every token, and each cudaMallocAsync / cudaFreeAsync costs
// a microsecond or more of host time in a step that is bound by how fast the host issues work.
// A freed block goes to a free list of its (256-byte rounded) size and the next request of that
// size on the same stream takes it back; reuse is safe because every user of the block is
// ordered on that stream. Blocks above kMaxCached bytes (session state, logits of a long
// prefill) go back to the stream-ordered pool at once.
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ds4::cuda {

class BlockCache {
 public:
  static constexpr size_t kMaxCached = size_t{64} << 20;

  // nullptr with *err set when cudaMallocAsync fails.
  void* get(size_t bytes, cudaStream_t s, cudaError_t* err) {
    const size_t n = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(key(n, s));
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        live_[p] = {n, s};
        return p;
      }
    }
    void* p = nullptr;
    *err = cudaMallocAsync(&p, n, s);
    if (*err != cudaSuccess) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = {n, s};
    return p;
  }

  // False for a pointer this cache did not hand out.
  bool put(void* p) {
    if (!p) return true;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const Live l = it->second;
    live_.erase(it);
    if (l.bytes > kMaxCached) {
      cudaFreeAsync(p, l.stream);
    } else {
      free_[key(l.bytes, l.stream)].push_back(p);
    }
    return true;
  }

  // Returns every cached block to the pool (teardown, or an allocation that failed).
  void trim() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, v] : free_)
      for (void* p : v) cudaFreeAsync(p, k.stream);
    free_.clear();
  }

 private:
  struct Key {
    size_t bytes;
    cudaStream_t stream;
    bool operator==(const Key& o) const { return bytes == o.bytes && stream == o.stream; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<size_t>()(k.bytes) ^ std::hash<void*>()(k.stream); }
  };
  struct Live {
    size_t bytes;
    cudaStream_t stream;
  };
  static size_t round(size_t b) { return (b + 255) / 256 * 256; }
  static Key key(size_t n, cudaStream_t s) { return {n, s}; }
  std::mutex mu_;
  std::unordered_map<Key, std::vector<void*>, KeyHash> free_;
  std::unordered_map<void*, Live> live_;
};

// The process-wide cache the backend's alloc/release and the GEMV scratch buffers share.
BlockCache& block_cache();

}  // namespace ds4::cuda
