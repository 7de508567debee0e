#pragma once
// Token ids of a rendered chat prompt.
//
// HF tokenizes the rendered template with special-token parsing on, so that the template's
// own markers ("<｜User｜>", "<think>", "｜DSML｜") become single tokens. Parsing the whole text
// that way would also turn marker text typed by a user into control tokens. When no
// user-supplied string contains marker-like text (the normal case) the prompt is encoded in
// one piece exactly like HF. Otherwise each verbatim occurrence of such a string is encoded
// with special parsing off and the template text around it with it on.
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace ds4::server {

using EncodeFn = std::function<std::vector<int32_t>(std::string_view text, bool parse_special)>;

// True when `s` contains text that special-token parsing could turn into a marker.
bool has_marker_text(std::string_view s);

std::vector<int32_t> tokenize_rendered(const EncodeFn& encode, std::string_view rendered,
                                       const std::vector<std::string_view>& user_texts);

}  // namespace ds4::server
