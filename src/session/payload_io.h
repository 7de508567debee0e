#pragma once
// Internal: byte writer/reader of session payloads (payload.cpp: DeepSeek V4,
// payload_qwen35moe.cpp: qwen35moe), and the family entry points.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "session/session_impl.h"

namespace ds4::session {

inline constexpr char kMagic[8] = {'D', 'S', '4', 'S', 'E', 'S', 'S', '\0'};
inline constexpr uint32_t kVersion = 1;

class Out {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    b.insert(b.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> b;
};

class In {
 public:
  In(std::span<const uint8_t> bytes) : b_(bytes) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  template <class T>
  void get_vec(std::vector<T>& out, uint64_t count, const char* what) {
    if (count > (b_.size() - at_) / sizeof(T)) truncated(what);
    out.resize(static_cast<size_t>(count));
    if (count == 0) return;  // out.data() may be null
    std::memcpy(out.data(), b_.data() + at_, static_cast<size_t>(count) * sizeof(T));
    at_ += static_cast<size_t>(count) * sizeof(T);
  }
  size_t at() const { return at_; }

 private:
  void need(size_t n, const char* what) {
    if (b_.size() - at_ < n) truncated(what);
  }
  [[noreturn]] void truncated(const char* what) {
    fail("session payload: truncated at byte {} of {} while reading {}", at_, b_.size(), what);
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};


std::vector<uint8_t> save_qwen35moe_payload(const Session::Impl& s);
void load_qwen35moe_payload(Session::Impl& s, std::span<const uint8_t> bytes);

}  // namespace ds4::session
