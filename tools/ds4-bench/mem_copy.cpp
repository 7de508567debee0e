#include "mem_copy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ds4bench {

double copy_bandwidth_gbs(int threads, size_t bytes, int reps) {
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
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run([&](size_t off, size_t len) { std::memcpy(b + off, a + off, len); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

}  // namespace ds4bench
