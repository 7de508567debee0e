#include "mem_copy.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace ds4bench {

namespace {

// Sum of the 64-bit words of p[0..len) (len a multiple of 64, p 64-byte aligned) with the
// widest loads the CPU has: on this VM 16-byte loads read memory at about 2/3 of the rate of
// 64-byte ones, so a narrow loop would understate the bound.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const char* p, size_t len) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  for (size_t i = 0; i < len; i += 128) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
  }
  alignas(64) uint64_t v[8];
  _mm512_store_si512(v, _mm512_add_epi64(s0, s1));
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const char* p, size_t len) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  for (size_t i = 0; i < len; i += 64) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_add_epi64(s0, s1));
  return v[0] + v[1] + v[2] + v[3];
}
#endif

uint64_t sum_words(const char* p, size_t len) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_words_avx512(p, len);
  if (__builtin_cpu_supports("avx2")) return sum_words_avx2(p, len);
#endif
  uint64_t t = 0;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    t += v;
  }
  return t;
}

}  // namespace

double copy_bandwidth_gbs(int threads, size_t bytes, int reps, double* read_gbs) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bytes = bytes / 4096 * 4096;
  auto* a = static_cast<char*>(std::aligned_alloc(4096, bytes));
  auto* b = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (!a || !b) {
    std::free(a);
    std::free(b);
    ds4::fail("memory copy test: cannot allocate 2 x {} bytes", bytes);
  }
  std::unique_ptr<char, decltype(&std::free)> ga(a, &std::free), gb(b, &std::free);
  const size_t chunk = (bytes / static_cast<size_t>(threads) + 4095) / 4096 * 4096;
  auto run = [&](auto&& body) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      const size_t off = std::min(bytes, chunk * static_cast<size_t>(t));
      const size_t len = std::min(chunk, bytes - off);
      ts.emplace_back([&body, off, len] { body(off, len); });
    }
    for (auto& t : ts) t.join();
  };
  run([&](size_t off, size_t len) {  // first touch, by the threads that copy later
    std::memset(a + off, 1, len);
    std::memset(b + off, 0, len);
  });
  double best = 0, best_read = 0;
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run([&](size_t off, size_t len) { std::memcpy(b + off, a + off, len); });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
    // Read only (what a decode step does with the weights): 8 independent 64-bit sums.
    t0 = std::chrono::steady_clock::now();
    run([&](size_t off, size_t len) { sums[off / chunk] = sum_words(a + off, len); });
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_read = std::max(best_read, static_cast<double>(bytes) / s / 1e9);
  }
  if (read_gbs) *read_gbs = best_read;
  return best;
}

}  // namespace ds4bench
