// OpenAI /v1/chat/completions and /v1/completions request bodies.
#include <fmt/format.h>

#include "chat/openai_parse.h"
#include "server/request_common.h"

namespace ds4::server {

using chat::Json;
using namespace detail;

namespace {

void parse_stream(const Json& body, GenRequest& r) {
  r.stream = opt_bool(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", fmt::format("expected an object, got {}", type_name(*so)));
    if (const Json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) {
        bad("stream_options.include_usage", fmt::format("expected a boolean, got {}", type_name(*iu)));
      }
      r.include_usage = iu->get<bool>();
    }
  }
}

void reject_n(const Json& body) {
  if (auto n = opt_int(body, "n", 1, 128); n && *n != 1) bad("n", "only n = 1 is supported");
}

}  // namespace

GenRequest parse_chat_completions(const Json& body, const ParseContext& ctx) {
  require_object(body);
  GenRequest r;
  r.api = ApiKind::Chat;
  r.model = check_model(body, ctx);
  parse_stream(body, r);
  reject_n(body);
  parse_sampling(body, r);
  parse_thinking(body, ctx, r.model, r);
  r.stop = parse_stop(body, "stop");
  auto mt = opt_int(body, "max_tokens", 1, int64_t{1} << 40);
  if (auto mct = opt_int(body, "max_completion_tokens", 1, int64_t{1} << 40)) mt = mct;
  r.max_tokens = mt.value_or(ctx.default_max_tokens);
  if (opt_bool(body, "logprobs").value_or(false)) {
    r.top_logprobs = static_cast<int32_t>(opt_int(body, "top_logprobs", 0, 20).value_or(0));
  } else if (field(body, "top_logprobs")) {
    (void)opt_int(body, "top_logprobs", 0, 20);
  }
  bool allow_tools = tool_choice_allows_tools(body);
  try {
    r.conversation = chat::parse_chat_request(body);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw bad_request_from(e);
  }
  if (r.conversation->messages.empty()) bad("messages", "must contain at least one message");
  bool has_tools = false;
  for (auto& m : r.conversation->messages) {
    if (!allow_tools) m.tools.clear();
    has_tools = has_tools || !m.tools.empty();
  }
  r.tools_enabled = has_tools;
  fold_late_system_turns(*r.conversation);
  attach_tool_blocks(*r.conversation, ctx);
  return r;
}

GenRequest parse_completions(const Json& body, const ParseContext& ctx) {
  require_object(body);
  GenRequest r;
  r.api = ApiKind::Completions;
  r.model = check_model(body, ctx);
  parse_stream(body, r);
  reject_n(body);
  parse_sampling(body, r);
  r.stop = parse_stop(body, "stop");
  r.max_tokens = opt_int(body, "max_tokens", 1, int64_t{1} << 40).value_or(ctx.default_max_tokens);
  if (auto lp = opt_int(body, "logprobs", 0, 5)) r.top_logprobs = static_cast<int32_t>(*lp);
  if (opt_bool(body, "echo").value_or(false)) bad("echo", "echo is not supported");
  if (auto s = opt_string(body, "suffix"); s && !s->empty()) bad("suffix", "suffix is not supported");
  const Json* p = field(body, "prompt");
  if (!p) bad("prompt", "missing");
  if (p->is_string()) {
    r.raw_prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.raw_prompt = (*p)[0].get<std::string>();
  } else {
    bad("prompt", fmt::format("expected a string (or an array of one string), got {}", type_name(*p)));
  }
  if (r.raw_prompt.empty()) bad("prompt", "empty");
  return r;
}

}  // namespace ds4::server
