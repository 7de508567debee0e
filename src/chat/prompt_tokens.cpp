#include "chat/prompt_tokens.h"

namespace ds4::chat {

std::vector<int32_t> tokenize_marked(const EncodeFn& encode, const MarkedText& prompt) {
  std::vector<int32_t> out;
  const std::string_view text = prompt.text;
  auto append = [&](std::string_view part, bool special) {
    if (part.empty()) return;
    auto ids = encode(part, special);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  size_t at = 0;
  for (auto [b, e] : prompt.controls) {
    append(text.substr(at, b - at), false);
    append(text.substr(b, e - b), true);
    at = e;
  }
  append(text.substr(at), false);
  return out;
}

std::optional<MarkedText> marked_suffix(const MarkedText& m, size_t offset) {
  if (offset > m.text.size()) return std::nullopt;
  MarkedText out;
  out.text = m.text.substr(offset);
  for (auto [b, e] : m.controls) {
    if (e <= offset) continue;
    if (b < offset) return std::nullopt;
    out.controls.emplace_back(b - offset, e - offset);
  }
  return out;
}

}  // namespace ds4::chat
