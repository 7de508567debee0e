#pragma once
// Bounds on client JSON checked before it is parsed. nlohmann's parser is iterative, but
// copying, converting, dumping and comparing a value recurse once per nesting level, so
// ~50,000 levels (100 KB of "[") overflow the stack; and ordered_json (which keeps the
// client's key order) finds keys by linear search, so one object with millions of members
// costs hours of CPU to parse. Every JSON text that comes from a client (request bodies,
// tool-call argument strings) passes through this check first.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ds4::chat {

// Deeper than any real request (tool schemas nest a few tens of levels).
inline constexpr int kMaxJsonDepth = 128;
// Far more than any real tool schema has properties; parse time of an object is quadratic.
inline constexpr size_t kMaxJsonObjectMembers = 1000;

// "JSON nested deeper than 128 levels (byte 130)" or "a JSON object has more than 1000
// members (byte 9001)" for the first violation in `text` (bytes count from 1), else nullopt.
// Brackets, braces and commas inside strings do not count. For text that is not JSON the
// answer is meaningless but harmless: the parser stops at its first error, and up to there
// its structure equals the one counted here.
std::optional<std::string> json_limit_error(std::string_view text);

}  // namespace ds4::chat
