#pragma once
// Rendered prompt text together with the byte ranges where the renderer itself placed control
// tokens ("<｜User｜>", "</think>", "｜DSML｜", ...). Tokenization splits the text only at
// these ranges and encodes everything between them with special-token parsing off, so text
// that came from a client can never become a control token, whatever it contains or
// whatever template text surrounds it (chat/prompt_tokens.h).
//
// Only three kinds of text are ever appended:
//   plain()   any text, client-supplied or not: never a control token;
//   control() one control token the renderer decided to write;
//   templ()   a constant of the prompt format (markers.h): its control tokens are marked.
//             It must never be given client text.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds4::chat {

struct MarkedText {
  std::string text;
  std::vector<std::pair<size_t, size_t>> controls;  // [begin, end) byte ranges, ascending

  void plain(std::string_view s) { text += s; }
  void control(std::string_view token) {
    controls.emplace_back(text.size(), text.size() + token.size());
    text += token;
  }
  void templ(std::string_view constant);
  // A block the model sampled (tool_block_cache.h): its "｜DSML｜" tags are control tokens,
  // everything else in it is plain text.
  void sampled_dsml(std::string_view block);
};

}  // namespace ds4::chat
