#include "agent/engine_model.h"

#include <chrono>

#include "chat/dsml_gate.h"
#include "chat/prompt_tokens.h"
#include "core/error.h"

namespace ds4::agent {

const char* to_string(GenStop s) {
  switch (s) {
    case GenStop::StopToken: return "stop";
    case GenStop::MaxTokens: return "length";
    case GenStop::Cancelled: return "cancelled";
    case GenStop::ContextFull: return "context_full";
    case GenStop::Callback: return "tool_calls";
  }
  return "?";
}

EngineModel::EngineModel(std::shared_ptr<const Engine> engine, int64_t n_ctx, const SamplerConfig& sampling)
    : engine_(std::move(engine)) {
  if (!engine_->info().has_tokenizer) fail("{}: the model has no tokenizer; ds4-agent needs text", engine_->info().model_name);
  SessionOptions so;
  so.n_ctx = n_ctx;
  session_ = engine_->new_session(so);
  session_->set_sampler(sampling);
}

std::string EngineModel::model_name() const { return engine_->info().model_name; }
std::string EngineModel::model_id() const { return engine_->info().model_id; }
int64_t EngineModel::n_ctx() const { return session_->n_ctx(); }
int64_t EngineModel::n_past() const { return session_->n_past(); }
void EngineModel::set_sampler(const SamplerConfig& config) { session_->set_sampler(config); }

std::vector<int32_t> EngineModel::tokenize(const chat::MarkedText& text) const {
  const Tokenizer& tok = engine_->tokenizer();
  return chat::tokenize_marked([&](std::string_view t, bool special) { return tok.encode(t, special); }, text);
}

EvalOptions EngineModel::eval_options(const EvalControl& c) const {
  EvalOptions eo;
  eo.cancel = c.cancel;
  eo.progress = c.progress;
  return eo;
}

PrefillStats EngineModel::append(const chat::MarkedText& text, const EvalControl& control) {
  const std::vector<int32_t> ids = tokenize(text);
  const EvalResult r = session_->eval(ids, eval_options(control));
  if (r.cancelled) {
    text_ = engine_->tokenizer().decode(session_->tokens());
  } else {
    text_.append(text.text);
  }
  return PrefillStats{r.reused, r.replayed, r.evaluated, r.cancelled, r.seconds};
}

PrefillStats EngineModel::resync(const chat::MarkedText& text, const EvalControl& control) {
  const std::vector<int32_t> ids = tokenize(text);
  const EvalResult r = session_->sync(ids, eval_options(control));
  if (r.cancelled) {
    text_ = engine_->tokenizer().decode(session_->tokens());
  } else {
    text_.assign(text.text);
  }
  return PrefillStats{r.reused, r.replayed, r.evaluated, r.cancelled, r.seconds};
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

GenStats EngineModel::generate(const GenParams& params, const PieceFn& on_piece) {
  const auto t0 = Clock::now();
  const Tokenizer& tok = engine_->tokenizer();
  chat::DsmlGate gate;
  GenStats st;
  for (;;) {
    if (params.max_tokens >= 0 && st.generated >= params.max_tokens) {
      st.reason = GenStop::MaxTokens;
      break;
    }
    if (params.cancel && params.cancel->load()) {
      st.reason = GenStop::Cancelled;
      break;
    }
    if (session_->n_past() >= session_->n_ctx()) {
      st.reason = GenStop::ContextFull;
      break;
    }
    SampleOptions so;
    if (gate.structural()) so.temperature = 0.0f;
    const int32_t id = session_->sample(so);
    if (engine_->is_stop_token(id)) {
      st.reason = GenStop::StopToken;
      break;
    }
    const std::string& piece = tok.token_to_piece(id);
    gate.feed(piece);
    ++st.generated;
    const bool go_on = on_piece(piece);
    session_->eval(std::span<const int32_t>(&id, 1));
    text_.append(piece);
    if (!go_on) {
      st.reason = GenStop::Callback;
      break;
    }
  }
  st.seconds = since(t0);
  return st;
}

GenStats EngineModel::generate_forced(std::string_view forced, const GenParams& params, const PieceFn& on_piece) {
  const auto t0 = Clock::now();
  const Tokenizer& tok = engine_->tokenizer();
  const std::vector<int32_t> ids = tok.encode(forced, /*parse_special=*/true);
  GenStats st;
  st.reason = GenStop::StopToken;
  for (int32_t id : ids) {
    if (params.max_tokens >= 0 && st.generated >= params.max_tokens) {
      st.reason = GenStop::MaxTokens;
      break;
    }
    if (params.cancel && params.cancel->load()) {
      st.reason = GenStop::Cancelled;
      break;
    }
    if (session_->n_past() >= session_->n_ctx()) {
      st.reason = GenStop::ContextFull;
      break;
    }
    const std::string& piece = tok.token_to_piece(id);
    ++st.generated;
    const bool go_on = on_piece(piece);
    session_->eval(std::span<const int32_t>(&id, 1));
    text_.append(piece);
    if (!go_on) {
      st.reason = GenStop::Callback;
      break;
    }
  }
  st.seconds = since(t0);
  return st;
}

void EngineModel::save_state(const std::string& path) const { session_->save(path); }

void EngineModel::load_state(const std::string& path) {
  session_->load(path);
  text_ = engine_->tokenizer().decode(session_->tokens());
}

}  // namespace ds4::agent
