#pragma once
// Small streaming text helpers used between sampled token pieces and API deltas.
#include <string>
#include <string_view>
#include <vector>

namespace ds4::server {

// Holds back an incomplete UTF-8 sequence at the end of the stream so that every piece handed
// on is valid UTF-8 (JSON strings must be). Invalid bytes become U+FFFD.
class Utf8Joiner {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is pending, repaired

 private:
  std::string pending_;
};

// Replaces invalid UTF-8 with U+FFFD.
std::string repair_utf8(std::string_view s);

// Finds stop sequences in streamed text. Text that could still be the start of a stop sequence
// is held back until it can be decided.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`; returns the part that is now safe to emit. After a match, `matched()` is
  // true, the text before the stop sequence has been returned, and further input is ignored.
  std::string push(std::string_view text);
  std::string flush();  // end of stream: held-back text is safe
  bool matched() const { return matched_; }
  const std::string& matched_sequence() const { return which_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;
  bool matched_ = false;
  std::string which_;
};

}  // namespace ds4::server
