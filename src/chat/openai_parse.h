#pragma once
// OpenAI-style chat JSON → Conversation. Errors are ds4::Error naming the JSON path,
// e.g. "messages[3].tool_calls[0].function.arguments: not valid JSON".
//
// The input is ordered_json (not nlohmann::json, which sorts keys): tool schemas and
// arguments are re-serialized into the prompt in the key order the client sent, exactly
// like the Python encoder does.
#include "chat/conversation.h"

#include <string_view>

namespace ds4::chat {

// "a string", "an object", ...: how error messages name a JSON value's type.
const char* json_type_name(const Json& j);

struct ParseOptions {
  // The official encoder renders tool-call arguments that are not valid JSON as a single
  // string parameter named "arguments". Off by default: such a request is an error.
  bool lenient_arguments = false;
};

// `messages`: the array. Extensions beyond OpenAI that the official encoder knows are
// accepted per message: roles "developer" and "latest_reminder", "tools" and
// "response_format" on system/developer messages, "task" on user messages, "wo_eos" on
// assistant messages.
Conversation parse_messages(const Json& messages, const ParseOptions& opts = {});

// A whole request object: "messages" plus optional top-level "tools". Top-level tools are
// attached to the first message when it is a system message, otherwise to a new empty
// system message put in front (the official encoder only knows per-message tools).
Conversation parse_chat_request(const Json& request, const ParseOptions& opts = {});
Conversation parse_chat_request_text(std::string_view json_text, const ParseOptions& opts = {});

// Parses OpenAI "tools" (objects with a "function" member) into function objects.
std::vector<Json> parse_tools(const Json& tools, std::string_view path);

}  // namespace ds4::chat
