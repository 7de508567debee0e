#pragma once
// A fixed set of worker threads that split index ranges. One pool serves every
// parallel loop of the engine so thread count is set once (--threads) and no loop
// spawns threads of its own. The calling thread takes part in the work.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds4 {

class ThreadPool {
 public:
  // n_threads <= 0 picks std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks are at least `grain`
  // items long, so tiny loops run inline on the caller without waking anyone.
  // Exceptions thrown by fn are rethrown on the caller (the first one wins).
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  int running_ = 0;  // chunks being run (claimed, not finished), guarded by mu_

  // The job in flight (valid while the caller is inside parallel_for).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  int64_t next_chunk_ = 0;  // guarded by mu_
  std::exception_ptr error_;
};

}  // namespace ds4
