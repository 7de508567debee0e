#include "chat/marked_text.h"

#include "chat/markers.h"

namespace ds4::chat {

void MarkedText::templ(std::string_view constant) {
  size_t at = 0;  // start of the not yet appended rest of `constant`
  for (size_t i = 0; i < constant.size();) {
    std::string_view hit;
    for (std::string_view tok : mark::kControlTokens) {
      if (constant.substr(i, tok.size()) == tok && tok.size() > hit.size()) hit = tok;
    }
    if (hit.empty()) {
      ++i;
      continue;
    }
    plain(constant.substr(at, i - at));
    control(hit);
    i += hit.size();
    at = i;
  }
  plain(constant.substr(at));
}

void MarkedText::sampled_dsml(std::string_view block) {
  size_t at = 0;
  for (size_t i = block.find(mark::kDsml); i != std::string_view::npos; i = block.find(mark::kDsml, at)) {
    plain(block.substr(at, i - at));
    control(mark::kDsml);
    at = i + mark::kDsml.size();
  }
  plain(block.substr(at));
}

}  // namespace ds4::chat
