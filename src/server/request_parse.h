#pragma once
// HTTP request bodies → GenRequest. Every error is an ApiError (400 naming the JSON field,
// 404 for an unknown model) thrown before any inference work is queued.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/conversation.h"
#include "server/gen_types.h"

namespace ds4::server {

struct ParseContext {
  // Model names this server answers to. The first is the canonical id; "deepseek-chat"
  // disables and "deepseek-reasoner" enables thinking, as in ds4.
  std::vector<std::string> model_ids;
  int64_t n_ctx = 0;                  // for Think-Max eligibility
  int64_t default_max_tokens = 4096;  // when the request names none
  chat::ChatFormat chat_format = chat::ChatFormat::DeepSeekV4;  // the model family's prompt format
  chat::ChatmlTemplate chatml_template = chat::ChatmlTemplate::Qwen36;  // ChatML: the template revision
  // Exact DSML block sampled for these tool-call ids (tool_block_cache.h), or nullopt.
  std::function<std::optional<std::string>(const std::vector<std::string>& ids)> lookup_tool_block;
};

// Parses the body text as JSON (400 "request: not valid JSON ..." on failure).
chat::Json parse_body(std::string_view body);

GenRequest parse_chat_completions(const chat::Json& body, const ParseContext& ctx);
GenRequest parse_completions(const chat::Json& body, const ParseContext& ctx);
GenRequest parse_responses(const chat::Json& body, const ParseContext& ctx);
GenRequest parse_messages(const chat::Json& body, const ParseContext& ctx);

}  // namespace ds4::server
