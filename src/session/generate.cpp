// Session::generate: the sample -> stream -> evaluate loop.
#include <chrono>

#include "core/error.h"
#include "session/session_impl.h"

namespace ds4 {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::StopToken: return "stop_token";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Callback: return "callback";
  }
  return "?";
}

GenerateResult Session::generate(const GenerateOptions& o, const TokenFn& on_token) {
  Impl& s = *impl_;
  if (s.n_pos() == 0) fail("generate: the session is empty (evaluate a prompt first)");
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult r;
  const Tokenizer* tok = s.e->tokenizer ? &*s.e->tokenizer : nullptr;
  const EvalOptions no_cancel;  // one token: cancellation is checked before sampling instead
  for (;;) {
    if (o.max_tokens >= 0 && r.n_generated >= o.max_tokens) {
      r.reason = StopReason::MaxTokens;
      break;
    }
    if (o.cancel && o.cancel->load(std::memory_order_relaxed)) {
      r.reason = StopReason::Cancelled;
      break;
    }
    if (s.n_pos() >= s.n_ctx) {
      r.reason = StopReason::ContextFull;
      break;
    }
    GeneratedToken g;
    g.id = s.sampler.sample(s.logits(), o.sample);
    if (o.logprobs_top_n >= 0) g.logprobs = compute_logprobs(s.logits(), g.id, o.logprobs_top_n);
    if (tok && g.id < tok->n_vocab()) g.piece = tok->token_to_piece(g.id);
    g.is_stop = o.stop_at_stop_tokens && s.engine->is_stop_token(g.id);
    ++r.n_generated;
    const bool go_on = on_token(g);
    if (g.is_stop) {
      r.reason = StopReason::StopToken;
      break;
    }
    const int32_t id = g.id;
    s.append(std::span<const int32_t>(&id, 1), no_cancel, false, 0, 1);
    if (!go_on) {
      r.reason = StopReason::Callback;
      break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ds4
