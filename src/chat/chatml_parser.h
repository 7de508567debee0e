#pragma once
// Incremental parser for Qwen3.5/3.6 generated text after a ChatML generation prompt: reasoning
// up to "</think>", visible content, then tool calls in Qwen3.5's XML form
//   <tool_call>\n<function=NAME>\n(<parameter=KEY>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
// separated by "\n". It emits the same events as the DSML parser (dsml_parser.h), so front
// ends handle both formats alike: ToolCallEnd carries the arguments as JSON text built the
// way the server streams them ({"key": "value", "n": 42}: a value is a JSON string unless the
// tool schema types the parameter as non-string, or, without a schema, it parses as JSON), and
// ToolCallsEnd the exact bytes of the block (for byte-exact replay in later prompts).
// The content's newlines just before the first <tool_call> and just after </think> are the
// template's separators and are not reported as text. Memory is bounded by DsmlParserLimits.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chat/conversation.h"
#include "chat/dsml_parser.h"

namespace ds4::chat {

class ChatmlStreamParser {
 public:
  // in_reasoning: the prompt ended with "<think>\n". tools: the request's function schemas
  // (OpenAI `function` objects), for parameter types; may be empty.
  ChatmlStreamParser(bool in_reasoning, const std::vector<Json>& tools, DsmlParserLimits limits = {});

  void feed(std::string_view piece, std::vector<DsmlEvent>& out);
  void finish(std::vector<DsmlEvent>& out);
  bool failed() const { return state_ == State::Failed; }

 private:
  enum class State { Reasoning, AfterThink, Content, CallHeader, Params, ParamValue, AfterCall, Done, Failed };
  bool step(std::vector<DsmlEvent>& out, bool at_end);
  void error(std::vector<DsmlEvent>& out, std::string msg);
  bool is_string_param(const std::string& fn, const std::string& key, const std::string& raw) const;

  State state_;
  DsmlParserLimits limits_;
  std::map<std::string, std::map<std::string, bool>> string_params_;  // tool -> param -> is string
  std::string buf_;
  std::string block_;  // raw bytes of the tool-call block so far
  std::string name_, key_, args_;
  bool in_block_ = false;
};

}  // namespace ds4::chat
