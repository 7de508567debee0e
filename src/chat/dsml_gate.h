#pragma once
// Decides, token by token, whether generation is inside DSML tool-call structure (tags,
// invoke and parameter headers, separators) or inside a parameter's value. Structure is
// sampled greedily so the block stays parseable; values use the caller's sampling (greedy
// payloads tend to loop on long code or file bodies). Fed the same text as the DSML parser.
//
// Shared by every front end that generates tool calls (ds4-server, ds4-agent).
#include <string>
#include <string_view>

namespace ds4::chat {

class DsmlGate {
 public:
  void feed(std::string_view piece);
  // True while the next token belongs to DSML structure.
  bool structural() const { return in_block_ && !in_value_; }

 private:
  std::string tail_;  // the last bytes seen, enough to find any marker across pieces
  bool in_block_ = false;
  bool in_value_ = false;
  bool in_header_ = false;  // between "<｜DSML｜parameter" and its closing '>'
};

}  // namespace ds4::chat
