#pragma once
// Bounds on client JSON checked before anything recursive touches it. nlohmann's parser is
// iterative, but copying, converting, dumping and comparing a value recurse once per nesting
// level, so ~50,000 levels (100 KB of "[") overflow the stack. Every JSON text that comes
// from a client (request bodies, tool-call argument strings) passes through this check first.
#include <cstddef>
#include <string_view>

namespace ds4::chat {

// Deeper than any real request (tool schemas nest a few tens of levels).
inline constexpr int kMaxJsonDepth = 128;

// Byte offset (0-based) of the bracket that first opens level max_depth + 1 in `text`,
// or npos when no value nests deeper than max_depth. Brackets inside strings do not count.
// For text that is not JSON the answer is meaningless but harmless: the JSON parser stops at
// the first error, and up to there its nesting equals the one counted here.
size_t json_depth_violation(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace ds4::chat
