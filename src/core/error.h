#pragma once
// One exception type for every recoverable failure in libds4. The message names what was
// wrong and where (file and byte offset, tensor name, JSON path) so callers can print it as is.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ds4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <class... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ds4
