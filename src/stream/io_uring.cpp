// io_uring engine (liburing): one submission per batch, completions reaped from the ring.
// Reads beyond the ring's capacity wait in a user-space queue, demand reads first.
#include <liburing.h>

#include <cstring>
#include <deque>
#include <vector>

#include "stream/io.h"

namespace ds4::stream {

namespace {

class UringEngine final : public IoEngine {
 public:
  UringEngine() = default;
  bool init(unsigned depth, std::string* why) {
    depth_ = std::max(4u, depth);
    int r = io_uring_queue_init(depth_, &ring_, 0);
    if (r < 0) {
      if (why) *why = std::string("io_uring_queue_init: ") + std::strerror(-r);
      return false;
    }
    ok_ = true;
    slots_.resize(depth_);
    for (unsigned i = 0; i < depth_; ++i) free_.push_back(i);
    return true;
  }
  ~UringEngine() override {
    if (!ok_) return;
    ReadDone d;
    while (in_flight() > 0 && reap(d, true)) {
    }
    io_uring_queue_exit(&ring_);
  }

  void submit(std::span<const ReadOp> ops) override {
    for (const auto& op : ops) {
      (op.prefetch ? wait_prefetch_ : wait_demand_).push_back({op, 0});
      ++pending_;
    }
    pump();
  }

  bool reap(ReadDone& out, bool block) override {
    for (;;) {
      if (!ready_.empty()) {
        out = ready_.front();
        ready_.pop_front();
        --pending_;
        return true;
      }
      if (pending_ == 0) return false;
      io_uring_cqe* cqe = nullptr;
      int r = block ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r == -EAGAIN && !block) return false;
      if (r < 0 || !cqe) return false;
      const unsigned idx = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      Slot& s = slots_[idx];
      if (res < 0) {
        finish(idx, res);
      } else if (res == 0 || s.done + static_cast<uint32_t>(res) >= s.op.len) {
        s.done += static_cast<uint32_t>(res);
        finish(idx, s.done);
      } else {  // short read before the end: continue where it stopped
        s.done += static_cast<uint32_t>(res);
        free_.push_back(idx);
        (s.op.prefetch ? wait_prefetch_ : wait_demand_).push_front({s.op, s.done});
      }
      pump();
    }
  }

  size_t in_flight() const override { return pending_; }
  const char* name() const override { return "io_uring"; }

 private:
  struct Slot {
    ReadOp op;
    uint32_t done = 0;
  };
  struct Waiting {
    ReadOp op;
    uint32_t done;
  };

  void finish(unsigned idx, int64_t result) {
    ready_.push_back({slots_[idx].op.tag, result});
    free_.push_back(idx);
  }

  void pump() {
    unsigned queued = 0;
    while (!free_.empty() && (!wait_demand_.empty() || !wait_prefetch_.empty())) {
      auto& q = wait_demand_.empty() ? wait_prefetch_ : wait_demand_;
      Waiting w = q.front();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (!sqe) break;
      q.pop_front();
      const unsigned idx = free_.back();
      free_.pop_back();
      slots_[idx] = {w.op, w.done};
      io_uring_prep_read(sqe, w.op.fd, w.op.dst + w.done, w.op.len - w.done, w.op.offset + w.done);
      io_uring_sqe_set_data64(sqe, idx);
      ++queued;
    }
    if (queued) io_uring_submit(&ring_);
  }

  io_uring ring_{};
  bool ok_ = false;
  unsigned depth_ = 0;
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;
  std::deque<Waiting> wait_demand_, wait_prefetch_;
  std::deque<ReadDone> ready_;
  size_t pending_ = 0;  // submitted by the caller and not yet reaped
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(unsigned depth, std::string* why) {
  auto e = std::make_unique<UringEngine>();
  if (!e->init(depth, why)) return nullptr;
  return e;
}

}  // namespace ds4::stream
