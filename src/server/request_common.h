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
// Thinking controls of r.api (set it first), documented in docs/CLIENTS.md: chat completions
// thinking {type}, reasoning_effort, reasoning.effort, think; responses reasoning.effort;
// messages thinking {type} and output_config.effort. Off by default for messages only;
// "none" efforts turn it off, "max" asks for Think-Max; deepseek-chat / -reasoner aliases
// decide when the request has no switch.
void parse_thinking(const chat::Json& body, const ParseContext& ctx, const std::string& model, GenRequest& r);
// System turns after the first message. DeepSeek's encoder writes a system message's content
// as is wherever it stands, and writes the "<｜Assistant｜>" transition only after a user turn
// that the assistant directly follows; so a conversation ending in a system turn after a user
// turn (Claude Code sends [user, system]) would get no generation prompt. Where that would
// happen (the system turns end the conversation or precede the assistant), the system text is
// appended to the user turn before it: the encoder's exact bytes, plus the transition. After
// tool results it becomes a user block instead. Elsewhere system turns are left as they are.
void fold_late_system_turns(chat::Conversation& conv);
// Sets raw_tool_block on assistant messages whose tool-call ids have a recorded block.
void attach_tool_blocks(chat::Conversation& conv, const ParseContext& ctx);
// "auto" / "none" / "required" / {"type": ...}: false only for "none".
bool tool_choice_allows_tools(const chat::Json& body);

}  // namespace ds4::server::detail
