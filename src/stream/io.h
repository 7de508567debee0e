#pragma once
// Asynchronous reads of expert bytes: io_uring (liburing) where the kernel allows it, else a
// pool of pread threads. Callers submit a batch (one layer's misses) and reap completions one
// by one. Requests are used as given: for an O_DIRECT descriptor the caller aligns offset,
// length and destination (see store.h). A completion reports the bytes read in total, which is
// less than the length only at end of file; short reads before that are continued internally.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ds4::stream {

struct ReadOp {
  int fd = -1;
  uint64_t offset = 0;
  uint32_t len = 0;
  uint8_t* dst = nullptr;
  uint64_t tag = 0;       // returned with the completion
  bool prefetch = false;  // pread pool: demand reads are always taken first
};

struct ReadDone {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes read, or -errno
};

enum class IoKind { Auto, Uring, Pread };

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual void submit(std::span<const ReadOp> ops) = 0;
  // One completion. block = false returns false when none is ready; block = true waits
  // (returns false only when nothing is in flight).
  virtual bool reap(ReadDone& out, bool block) = 0;
  virtual size_t in_flight() const = 0;
  virtual const char* name() const = 0;
};

// Auto tries io_uring first. depth: ring entries / most reads in flight; threads: pread pool.
std::unique_ptr<IoEngine> make_io_engine(IoKind kind, unsigned depth = 64, unsigned threads = 8);
std::unique_ptr<IoEngine> make_pread_engine(unsigned threads);
// nullptr (and the reason in *why) when io_uring is unavailable.
std::unique_ptr<IoEngine> make_uring_engine(unsigned depth, std::string* why);

}  // namespace ds4::stream
