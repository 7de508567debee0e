#include "chat/dsml_gate.h"

#include "chat/markers.h"

namespace ds4::chat {

void DsmlGate::feed(std::string_view piece) {
  // Byte by byte, so that state changes happen exactly where markers end.
  for (char c : piece) {
    tail_.push_back(c);
    if (tail_.size() > 64) tail_.erase(0, tail_.size() - 64);
    const std::string_view t = tail_;
    auto ends = [&](std::string_view m) { return t.size() >= m.size() && t.substr(t.size() - m.size()) == m; };
    if (!in_block_) {
      if (ends(mark::kToolCallsOpen)) in_block_ = true;
      continue;
    }
    if (in_value_) {
      if (ends(mark::kParamClose)) in_value_ = false;
      continue;
    }
    if (in_header_) {
      if (c == '>') {
        in_header_ = false;
        in_value_ = true;
      }
      continue;
    }
    if (ends(mark::kParamOpen)) {
      in_header_ = true;
    } else if (ends(mark::kToolCallsClose)) {
      in_block_ = false;
    }
  }
}

}  // namespace ds4::chat
