#include "core/thread_pool.h"

#include <algorithm>

namespace ds4 {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t begin;
    const std::function<void(int64_t, int64_t)>* fn;
    {
      std::lock_guard lk(mu_);
      begin = next_chunk_;
      if (begin >= job_n_ || error_) return;
      next_chunk_ = begin + job_chunk_;
      ++running_;
      fn = job_;
    }
    const int64_t end = std::min(job_n_, begin + job_chunk_);
    std::exception_ptr err;
    try {
      (*fn)(begin, end);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard lk(mu_);
    if (err && !error_) error_ = err;
    if (--running_ == 0) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();  // a worker that wakes after every chunk was claimed finds nothing and sleeps again
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t threads = size();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // About 4 chunks per thread balances uneven rows without much locking.
  int64_t chunk = std::max(grain, (n + threads * 4 - 1) / (threads * 4));
  {
    std::lock_guard lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    next_chunk_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  // Every chunk is claimed now; wait only for the chunks still running on workers, not for
  // workers that have not woken up yet (on a loaded machine that can take milliseconds).
  std::exception_ptr err;
  {
    std::unique_lock lk(mu_);
    done_.wait(lk, [&] { return running_ == 0; });
    job_ = nullptr;
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace ds4
