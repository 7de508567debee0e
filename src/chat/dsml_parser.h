#pragma once
// Incremental parser for DeepSeek V4 generated text: reasoning, visible text and DSML
// tool-call blocks. It is fed decoded text piece by piece while tokens stream (a piece may
// split a tag anywhere) and emits events as soon as they are certain.
//
// Grammar (strict, as the official parse_message_from_completion_text):
//   [reasoning "</think>"] text ["\n\n<｜DSML｜tool_calls>\n" invoke ("\n" invoke)*
//   "\n</｜DSML｜tool_calls>"] [EOS]
//   invoke = `<｜DSML｜invoke name="N">\n` (param ("\n" param)*)? `\n</｜DSML｜invoke>`
//   param  = `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`
// Anything else inside a block, a duplicate parameter, a string="false" value that is not
// JSON, or a block left open at finish() yields one Error event, after which the parser
// ignores further input. Memory is bounded by the limits in DsmlParserLimits.
#include "chat/dsml.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::chat {

enum class DsmlEventKind {
  Text,            // text: visible content
  Reasoning,       // text: reasoning content (before </think>)
  ReasoningEnd,    // "</think>" was consumed
  ToolCallsBegin,  // a tool-call block starts; following text belongs to it
  ToolCallStart,   // name: tool name
  Parameter,       // name, is_string, text: raw value as written
  ToolCallEnd,     // name; text: arguments JSON (official decode_dsml_to_arguments form)
  ToolCallsEnd,    // text: the exact block bytes, "\n\n<｜DSML｜tool_calls>…</｜DSML｜tool_calls>"
  Eos,             // the end-of-sentence marker appeared as text
  Error,           // text: what was wrong and where
};

struct DsmlEvent {
  DsmlEventKind kind;
  std::string text;
  std::string name;
  bool is_string = false;
};

struct DsmlParserLimits {
  size_t max_name_bytes = 1024;         // tool or parameter name
  size_t max_value_bytes = 16u << 20;   // one parameter value
  size_t max_block_bytes = 64u << 20;   // one whole tool-call block
};

class DsmlStreamParser {
 public:
  // `in_reasoning`: the prompt ended with "<think>", so output starts with reasoning.
  explicit DsmlStreamParser(bool in_reasoning, DsmlParserLimits limits = {});

  void feed(std::string_view piece, std::vector<DsmlEvent>& out);
  // End of generation (EOS sampled or a limit hit). Flushes held-back text and reports
  // anything left open.
  void finish(std::vector<DsmlEvent>& out);

  bool failed() const { return state_ == State::Failed; }
  // Tool calls completed so far in the current/last block.
  const std::vector<DsmlCall>& calls() const { return calls_; }

 private:
  enum class State {
    Reasoning, Content,
    BlockOpen, InvokeOrClose, InvokeHeader, AfterInvokeHeader, ParamHeader, ParamValue,
    AfterParam, AfterInvoke, AfterBlock, Done, Failed,
  };

  bool step(std::vector<DsmlEvent>& out);  // false when more input is needed
  void consume(size_t n);
  std::string_view avail() const { return std::string_view(buf_).substr(pos_); }
  void error(std::vector<DsmlEvent>& out, std::string msg);
  bool stream_until(std::string_view stop, DsmlEventKind kind, std::vector<DsmlEvent>& out,
                    bool& found);

  State state_;
  DsmlParserLimits limits_;
  std::string buf_;
  size_t pos_ = 0;
  bool in_block_ = false;
  std::string raw_;
  std::vector<DsmlCall> calls_;
  DsmlCall call_;
  DsmlParam param_;
};

}  // namespace ds4::chat
