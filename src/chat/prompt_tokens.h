#pragma once
// Token ids of rendered chat text (chat/marked_text.h), so that no user or tool string can
// become a control token: the text is split only where the renderer placed control tokens;
// each of those is encoded with special-token parsing on (one id), every stretch between them
// with it off.
// Used by the server (src/server/prepare.cpp) and the agent.
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "chat/marked_text.h"

namespace ds4::chat {

using EncodeFn = std::function<std::vector<int32_t>(std::string_view text, bool parse_special)>;

std::vector<int32_t> tokenize_marked(const EncodeFn& encode, const MarkedText& text);

// The part of `text` from byte `offset` on, with its control ranges. nullopt when `offset`
// falls inside a control token.
std::optional<MarkedText> marked_suffix(const MarkedText& text, size_t offset);

}  // namespace ds4::chat
