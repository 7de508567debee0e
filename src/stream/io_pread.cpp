// pread thread pool: the fallback where io_uring is unavailable (old kernels, seccomp, or
// io_uring_disabled). Demand reads wait in their own queue, ahead of every prefetch.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "stream/io.h"

namespace ds4::stream {

namespace {

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(unsigned threads) {
    for (unsigned i = 0; i < std::max(1u, threads); ++i) workers_.emplace_back([this] { run(); });
  }
  ~PreadEngine() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void submit(std::span<const ReadOp> ops) override {
    {
      std::lock_guard lk(mu_);
      for (const auto& op : ops) (op.prefetch ? prefetch_ : demand_).push_back(op);
      in_flight_ += ops.size();
    }
    cv_work_.notify_all();
  }

  bool reap(ReadDone& out, bool block) override {
    std::unique_lock lk(mu_);
    if (block) cv_done_.wait(lk, [&] { return !done_.empty() || in_flight_ == 0; });
    if (done_.empty()) return false;
    out = done_.front();
    done_.pop_front();
    --in_flight_;
    return true;
  }

  size_t in_flight() const override {
    std::lock_guard lk(mu_);
    return in_flight_;
  }
  const char* name() const override { return "pread"; }

 private:
  void run() {
    for (;;) {
      ReadOp op;
      {
        std::unique_lock lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || !demand_.empty() || !prefetch_.empty(); });
        if (stop_) return;
        auto& q = demand_.empty() ? prefetch_ : demand_;
        op = q.front();
        q.pop_front();
      }
      int64_t total = 0;
      while (total < op.len) {
        ssize_t r = ::pread(op.fd, op.dst + total, op.len - static_cast<size_t>(total),
                            static_cast<off_t>(op.offset + static_cast<uint64_t>(total)));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          total = -errno;
          break;
        }
        if (r == 0) break;
        total += r;
      }
      {
        std::lock_guard lk(mu_);
        done_.push_back({op.tag, total});
      }
      cv_done_.notify_all();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<ReadOp> demand_, prefetch_;
  std::deque<ReadDone> done_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> make_pread_engine(unsigned threads) { return std::make_unique<PreadEngine>(threads); }

std::unique_ptr<IoEngine> make_io_engine(IoKind kind, unsigned depth, unsigned threads) {
  if (kind == IoKind::Pread) return make_pread_engine(threads);
  std::string why;
  auto u = make_uring_engine(depth, &why);
  if (u || kind == IoKind::Uring) return u;
  return make_pread_engine(threads);
}

}  // namespace ds4::stream
