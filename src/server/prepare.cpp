#include "server/prepare.h"

#include <fmt/format.h>

#include "chat/prompt_tokens.h"
#include "chat/renderer.h"
#include "server/api_error.h"

namespace ds4::server {

void prepare_job(ApiKind api, std::string_view body_text, const ParseContext& pctx, const InferenceModel& model,
                 Job& job) {
  // One JSON type end to end (ordered_json): the client's key order reaches the prompt.
  chat::Json body = parse_body(body_text);
  switch (api) {
    case ApiKind::Chat: job.req = parse_chat_completions(body, pctx); break;
    case ApiKind::Completions: job.req = parse_completions(body, pctx); break;
    case ApiKind::Responses: job.req = parse_responses(body, pctx); break;
    case ApiKind::Messages: job.req = parse_messages(body, pctx); break;
  }
  GenRequest& g = job.req;
  chat::EncodeFn encode = [&model](std::string_view t, bool special) { return model.encode(t, special); };
  if (g.conversation) {
    try {
      chat::MarkedText marked = chat::render_prompt_marked(*g.conversation, g.render);
      job.prompt = chat::tokenize_marked(encode, marked);
      job.prompt_text = std::move(marked.text);
    } catch (const std::exception& e) {
      throw ApiError(400, std::string(api == ApiKind::Messages ? "messages: " : "") + client_message(e), "messages");
    }
    // DeepSeek's generation prompt ends with "<think>", ChatML's with "<think>\n".
    for (std::string_view think : {std::string_view("<think>"), std::string_view("<think>\n")})
      job.starts_in_reasoning = job.starts_in_reasoning ||
                                (job.prompt_text.size() >= think.size() &&
                                 job.prompt_text.compare(job.prompt_text.size() - think.size(), think.size(), think) == 0);
  } else {
    // /v1/completions: the raw prompt is the whole model input, written by the client, with
    // no template whose turns a string could forge; its control-token text is parsed (as
    // llama-server's /completion does), so a client can write its own turns (docs/SERVER.md).
    job.prompt_text = g.raw_prompt;
    job.prompt = model.encode(g.raw_prompt, true);
  }
  const int64_t n = static_cast<int64_t>(job.prompt.size());
  const int64_t n_ctx = model.n_ctx();
  if (n == 0) throw ApiError(400, "the prompt is empty after tokenization", "messages");
  if (n >= n_ctx) {
    throw ApiError(400,
                   fmt::format("context overflow: the prompt is {} tokens and the context holds {}; it is {} tokens "
                               "too long (at least one position must remain for the reply)",
                               n, n_ctx, n - n_ctx + 1),
                   "messages", "context_length_exceeded");
  }
  g.prompt_tokens = n;  // writers announce it before prefill (Anthropic message_start)
  job.max_tokens = g.max_tokens > 0 ? g.max_tokens : pctx.default_max_tokens;
}

}  // namespace ds4::server
