#pragma once
// Protocol-neutral description of one generation job and of what it produces. The four HTTP
// APIs (OpenAI chat / completions / responses, Anthropic messages) parse into GenRequest and
// render GenEvents back into their own shapes; the inference worker sees only these types.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/conversation.h"
#include "ds4/sampling.h"

namespace ds4::server {

enum class ApiKind { Chat, Completions, Responses, Messages };
const char* api_name(ApiKind k);

struct GenRequest {
  ApiKind api = ApiKind::Chat;
  std::string model;  // echoed back in responses
  bool stream = false;
  bool include_usage = false;  // chat: stream_options.include_usage

  // Exactly one of: a conversation rendered with `render`, or a raw prompt (completions).
  std::optional<chat::Conversation> conversation;
  chat::RenderOptions render;
  std::string raw_prompt;

  bool tools_enabled = false;  // tool schemas present and tool_choice != none: parse DSML
  int64_t max_tokens = -1;     // < 0: server default
  std::vector<std::string> stop;
  SamplerConfig sampling;
  int32_t top_logprobs = -1;   // >= 0: report logprobs with that many alternatives
  int64_t prompt_tokens = 0;   // set once the prompt is tokenized (streams announce it first)
};

// Token accounting reported in every response.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens reused from the live session
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;  // part of completion_tokens spent before </think>
  // Timings (reported by the OpenAI writers as llama-server's `timings` object).
  int64_t prefill_evaluated = 0;  // prompt tokens actually evaluated (prompt - cached, or more after a rewind)
  double prefill_ms = 0;          // wall time of the prefill
  double generation_ms = 0;       // wall time from the end of the prefill to the last token
};

enum class Finish { Stop, Length, ToolCalls, StopSequence, Cancelled };

struct LogprobEntry {
  std::string token;  // the token's bytes
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

struct GenEvent {
  enum class Kind {
    Reasoning,  // text
    Text,       // text (+ logprobs of the tokens that produced it)
    ToolStart,  // tool_index, tool_id, tool_name
    ToolArgs,   // tool_index, text: next piece of the arguments JSON
    ToolEnd,    // tool_index, tool_id, tool_name, text: the whole arguments JSON
    Done,       // finish, usage, stop_sequence
    Failed,     // status, text: message (after streaming began: reported in-band)
  };
  Kind kind = Kind::Text;
  std::string text;
  int tool_index = 0;
  std::string tool_id;
  std::string tool_name;
  std::vector<LogprobEntry> logprobs;
  Finish finish = Finish::Stop;
  std::string stop_sequence;
  Usage usage;
  int status = 500;
};

}  // namespace ds4::server
