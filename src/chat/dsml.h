#pragma once
// DSML tool-call blocks: the canonical rendering of JSON tool calls (what the official
// encoder writes for assistant history) and the conversion between DSML parameters and
// JSON arguments.
#include "chat/conversation.h"
#include "chat/marked_text.h"

#include <string>
#include <vector>

namespace ds4::chat {

struct DsmlParam {
  std::string name;
  bool is_string = true;  // string="true": value is raw text; otherwise a JSON literal
  std::string value;
  bool operator==(const DsmlParam&) const = default;
};

struct DsmlCall {
  std::string name;
  std::vector<DsmlParam> params;
  bool operator==(const DsmlCall&) const = default;
};

// Official encode_arguments_to_dsml: one parameter per argument key in the client's key
// order; strings raw with string="true", everything else as Python json.dumps with
// string="false". Arguments that were not a JSON object become one string parameter
// named "arguments".
DsmlCall dsml_call_from_tool_call(const ToolCall& call);

// `<｜DSML｜invoke name="N">\n` + params joined by "\n" + `\n</｜DSML｜invoke>`.
std::string render_invoke(const DsmlCall& call);
// "\n\n<｜DSML｜tool_calls>\n" + invokes joined by "\n" + "\n</｜DSML｜tool_calls>".
std::string render_tool_calls_block(const std::vector<DsmlCall>& calls);
// Canonical block for JSON tool calls (used when the exact sampled block is unknown).
std::string render_tool_calls_block(const std::vector<ToolCall>& calls);
// The same, appended to a prompt with its control tokens marked (names and values plain).
void render_invoke(const DsmlCall& call, MarkedText& out);
void render_tool_calls_block(const std::vector<DsmlCall>& calls, MarkedText& out);
void render_tool_calls_block(const std::vector<ToolCall>& calls, MarkedText& out);

// A parsed call as a JSON tool call (for API responses): `arguments_text` is the official
// decode_dsml_to_arguments text, `arguments` its parse. Throws ds4::Error naming the tool
// when a string="false" value is not JSON.
ToolCall tool_call_from_dsml(const DsmlCall& call, std::string id);

// Official decode_dsml_to_arguments: `{"k": v, ...}` where string values are JSON-quoted
// and non-string values are pasted as written.
std::string dsml_arguments_json(const DsmlCall& call);

}  // namespace ds4::chat
