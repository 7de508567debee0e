#pragma once
// Bounds-checked little-endian reads over an in-memory file image. Every failure throws
// ds4::Error "<name>: offset <n>: <what>" so callers never see a partial read.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace ds4::gguf::detail {

class ByteCursor {
 public:
  ByteCursor(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <class... Args>
  [[noreturn]] void fail_at(uint64_t offset, fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(fmt::format("{}: offset {}: {}", name_, offset, fmt::format(f, std::forward<Args>(args)...)));
  }

  template <class T>
  T read(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // u64 length + bytes. `max_len` bounds the copy independently of the file size.
  std::string read_string(const char* what, uint64_t max_len) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail_at(at, "{} length {} runs past end of file ({} bytes left)", what, len, remaining());
    if (len > max_len) fail_at(at, "{} length {} exceeds the {} bytes allowed", what, len, max_len);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > remaining()) fail_at(pos_, "truncated: {} needs {} bytes, {} left", what, n, remaining());
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

}  // namespace ds4::gguf::detail
