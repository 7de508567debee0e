#pragma once
// "18.53 MiB"-style byte counts for the plans and messages printed at start.
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace ds4 {

inline std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

}  // namespace ds4
