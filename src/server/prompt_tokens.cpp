#include "server/prompt_tokens.h"

#include <string>

namespace ds4::server {

std::vector<int32_t> tokenize_marked(const EncodeFn& encode, const chat::MarkedText& prompt) {
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

}  // namespace ds4::server
