#pragma once
// Token ids of a rendered chat prompt, built so that no client string can become a control
// token.
//
// The renderer records where it placed each control token (chat/marked_text.h). The text is
// split only there: each recorded control token is encoded with special-token parsing on
// (one id), and every stretch between two of them — template text and client text alike —
// with it off. Nothing is searched for in client text, so no content, name, schema, argument
// or overlap with the template around it can produce a control token.
//
// For prompts whose client strings contain no control-token text this gives exactly HF's ids
// for the whole text with special parsing on (what the official encoder's users run): HF
// also splits at every special token first and encodes the pieces between them on their own.
// tests/unit/server/test_prompt_tokens.cpp checks it on every rendered-prompt fixture.
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "chat/marked_text.h"

namespace ds4::server {

using EncodeFn = std::function<std::vector<int32_t>(std::string_view text, bool parse_special)>;

std::vector<int32_t> tokenize_marked(const EncodeFn& encode, const chat::MarkedText& prompt);

}  // namespace ds4::server
