#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

TEST(ThreadPool, CoversEveryIndexOnce) {
  ds4::ThreadPool pool(3);
  for (int64_t n : {1, 7, 1000, 12345}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, RethrowsWorkerExceptionsAndStaysUsable) {
  ds4::ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b >= 50) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}
