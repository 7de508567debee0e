#pragma once
// Field readers shared by the API parsers: each checks the JSON type and throws a 400
// ApiError naming the field ("temperature: expected a number, got a string").
#include <optional>
#include <string>

#include "chat/conversation.h"
#include "chat/openai_parse.h"
#include "server/api_error.h"
#include "server/request_parse.h"

namespace ds4::server::detail {

inline const char* type_name(const chat::Json& j) { return chat::json_type_name(j); }
[[noreturn]] void bad(const std::string& field, const std::string& what);

// Absent or null → nullopt.
const chat::Json* field(const chat::Json& obj, const char* name);
std::optional<std::string> opt_string(const chat::Json& obj, const char* name);
std::optional<bool> opt_bool(const chat::Json& obj, const char* name);
std::optional<double> opt_number(const chat::Json& obj, const char* name, double lo, double hi);
std::optional<int64_t> opt_int(const chat::Json& obj, const char* name, int64_t lo, int64_t hi);

void require_object(const chat::Json& body);
// Checks "model" against ctx.model_ids (404 when unknown) and returns the name to echo.
std::string check_model(const chat::Json& body, const ParseContext& ctx);
// temperature, top_p, top_k, min_p, seed (same names in all APIs).
void parse_sampling(const chat::Json& body, GenRequest& r);
// "stop" / "stop_sequences": a string or an array of strings (empty strings dropped).
std::vector<std::string> parse_stop(const chat::Json& body, const char* name);
// Thinking switches: model alias, reasoning_effort / reasoning.effort ("none" off, "max" Think-Max),
// thinking {"type": "enabled"|"disabled"}, think: bool.
void parse_thinking(const chat::Json& body, const ParseContext& ctx, const std::string& model, GenRequest& r);
// Sets raw_tool_block on assistant messages whose tool-call ids have a recorded block.
void attach_tool_blocks(chat::Conversation& conv, const ParseContext& ctx);
// "auto" / "none" / "required" / {"type": ...}: false only for "none".
bool tool_choice_allows_tools(const chat::Json& body);

}  // namespace ds4::server::detail
