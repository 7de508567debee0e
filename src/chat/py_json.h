#pragma once
// JSON text exactly as Python's `json.dumps(value, ensure_ascii=False)` writes it, which is
// what the official DeepSeek V4 encoder puts in prompts (tool schemas, non-string tool-call
// arguments, response formats): ", " and ": " separators, non-ASCII kept raw, control
// characters as lowercase \u00XX, floats as Python's repr().
#include "chat/conversation.h"

#include <string>

namespace ds4::chat {

std::string py_json_dumps(const Json& value);
void py_json_dump_to(const Json& value, std::string& out);
// A string as a JSON literal (quotes included).
void py_json_quote(std::string_view s, std::string& out);
// Python repr() of a double: shortest round-trip digits, fixed notation for decimal
// exponents in [-4, 16), otherwise "1e+16" style; integral values keep ".0".
std::string py_float_repr(double v);

}  // namespace ds4::chat
