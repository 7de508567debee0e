#include "chat/prompt_tokens.h"

#include <algorithm>
#include <utility>

namespace ds4::chat {

bool has_marker_text(std::string_view s) {
  // Every DeepSeek V4 special token contains U+FF5C "｜" except the think tags.
  return s.find("\xEF\xBD\x9C") != std::string_view::npos || s.find("<think>") != std::string_view::npos ||
         s.find("</think>") != std::string_view::npos;
}

std::vector<int32_t> tokenize_rendered(const EncodeFn& encode, std::string_view rendered,
                                       const std::vector<std::string_view>& untrusted) {
  std::vector<std::string_view> risky;
  for (auto t : untrusted) {
    if (!t.empty() && has_marker_text(t)) risky.push_back(t);
  }
  if (risky.empty()) return encode(rendered, true);

  // Byte ranges of verbatim untrusted text, longest strings first so that a string contained
  // in another one does not split it.
  std::sort(risky.begin(), risky.end(), [](auto a, auto b) { return a.size() > b.size(); });
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto t : risky) {
    for (size_t pos = rendered.find(t); pos != std::string_view::npos; pos = rendered.find(t, pos + t.size())) {
      const size_t end = pos + t.size();
      const bool overlaps =
          std::any_of(ranges.begin(), ranges.end(), [&](auto r) { return pos < r.second && r.first < end; });
      if (!overlaps) ranges.emplace_back(pos, end);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<int32_t> out;
  size_t at = 0;
  auto append = [&](std::string_view part, bool special) {
    if (part.empty()) return;
    auto ids = encode(part, special);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  for (auto [b, e] : ranges) {
    append(rendered.substr(at, b - at), true);
    append(rendered.substr(b, e - b), false);
    at = e;
  }
  append(rendered.substr(at), true);
  return out;
}

}  // namespace ds4::chat
