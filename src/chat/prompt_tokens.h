#pragma once
// Token ids of rendered chat text that embeds untrusted strings (user messages, tool output).
//
// HF tokenizes the rendered template with special-token parsing on, so that the template's
// own markers ("<｜User｜>", "<think>", "｜DSML｜") become single tokens. Parsing the whole text
// that way would also turn marker text inside a user's message or a file the agent read into
// control tokens. When no untrusted string contains marker-like text (the normal case) the text
// is encoded in one piece exactly like HF. Otherwise each verbatim occurrence of such a string
// is encoded with special parsing off and the template text around it with it on.
//
// src/server/prompt_tokens.h is an older copy in the server layer; it should switch to this one.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::chat {

using EncodeFn = std::function<std::vector<int32_t>(std::string_view text, bool parse_special)>;

// True when `s` contains text that special-token parsing could turn into a marker.
bool has_marker_text(std::string_view s);

std::vector<int32_t> tokenize_rendered(const EncodeFn& encode, std::string_view rendered,
                                       const std::vector<std::string_view>& untrusted);

}  // namespace ds4::chat
