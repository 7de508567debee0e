#include "chat/json_limits.h"

#include <fmt/format.h>

#include <array>

namespace ds4::chat {

std::optional<std::string> json_limit_error(std::string_view text) {
  // Per open level: whether it is an object, and the commas seen at that level.
  std::array<bool, kMaxJsonDepth + 1> is_object{};
  std::array<size_t, kMaxJsonDepth + 1> commas{};
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (depth == kMaxJsonDepth) return fmt::format("JSON nested deeper than {} levels (byte {})", kMaxJsonDepth, i + 1);
        ++depth;
        is_object[depth] = c == '{';
        commas[depth] = 0;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      case ',':
        if (depth > 0 && is_object[depth] && ++commas[depth] >= kMaxJsonObjectMembers) {
          return fmt::format("a JSON object has more than {} members (byte {})", kMaxJsonObjectMembers, i + 1);
        }
        break;
      default: break;
    }
  }
  return std::nullopt;
}

}  // namespace ds4::chat
