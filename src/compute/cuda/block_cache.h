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
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ds4::cuda {

class BlockCache {
 public:
  static constexpr size_t kMaxCached = size_t{64} << 20;

  // Memory of one recorded decode step (a CUDA graph): while an arena is open on a stream,
  // every get() on that stream is carved from it and never reused for anything else, since
  // the graph's replays write those addresses; put() of its blocks does nothing. The chunks
  // are freed with the graph (close_arena / free_arena).
  struct Arena {
    std::vector<std::pair<uint8_t*, size_t>> chunks;
    size_t used = 0;  // in the last chunk
  };
  static constexpr size_t kArenaChunk = size_t{64} << 20;

  // s2: a second stream recorded into the same graph (the backend's branch stream), or null.
  void open_arena(Arena* a, cudaStream_t s, cudaStream_t s2 = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    arena_ = a, arena_stream_ = s, arena_stream2_ = s2;
  }
  void close_arena() {
    std::lock_guard<std::mutex> lock(mu_);
    arena_ = nullptr, arena_stream_ = nullptr, arena_stream2_ = nullptr;
  }
  // The GPU must be done with the arena's graph.
  void free_arena(Arena& a) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, n] : a.chunks) {
      arena_ranges_.erase(reinterpret_cast<uintptr_t>(p));
      cudaFree(p);
    }
    a.chunks.clear();
    a.used = 0;
  }

  // nullptr with *err set when cudaMallocAsync fails.
  void* get(size_t bytes, cudaStream_t s, cudaError_t* err) {
    const size_t n = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (arena_ && (s == arena_stream_ || (arena_stream2_ && s == arena_stream2_))) return arena_get(n, err);
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
    if (in_arena(p)) return true;
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
  void* arena_get(size_t n, cudaError_t* err) {  // mu_ held
    Arena& a = *arena_;
    if (a.chunks.empty() || a.used + n > a.chunks.back().second) {
      const size_t sz = n > kArenaChunk ? n : kArenaChunk;
      uint8_t* c = nullptr;
      // Synchronous allocation outside the stream: allowed while the stream is recorded in
      // relaxed capture mode, and kept out of the graph.
      *err = cudaMalloc(reinterpret_cast<void**>(&c), sz);
      if (*err != cudaSuccess) return nullptr;
      a.chunks.emplace_back(c, sz);
      a.used = 0;
      arena_ranges_[reinterpret_cast<uintptr_t>(c)] = sz;
    }
    void* p = a.chunks.back().first + a.used;
    a.used += n;
    return p;
  }
  bool in_arena(void* p) const {  // mu_ held
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = arena_ranges_.upper_bound(a);
    if (it == arena_ranges_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }
  static Key key(size_t n, cudaStream_t s) { return {n, s}; }
  std::mutex mu_;
  std::unordered_map<Key, std::vector<void*>, KeyHash> free_;
  std::unordered_map<void*, Live> live_;
  Arena* arena_ = nullptr;
  cudaStream_t arena_stream_ = nullptr, arena_stream2_ = nullptr;
  std::map<uintptr_t, size_t> arena_ranges_;  // every live arena chunk: start -> bytes
};

// The process-wide cache the backend's alloc/release and the GEMV scratch buffers share.
BlockCache& block_cache();

}  // namespace ds4::cuda
