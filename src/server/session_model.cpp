// InferenceModel over the public Engine / Session API: one live session whose token prefix
// is reused across requests by Session::sync.

#include "ds4/engine.h"
#include "ds4/session.h"
#include "server/inference_model.h"

namespace ds4::server {

namespace {

class SessionModel final : public InferenceModel {
 public:
  SessionModel(std::shared_ptr<const Engine> engine, int64_t n_ctx) : engine_(std::move(engine)) {
    SessionOptions so;
    so.n_ctx = n_ctx;
    session_ = engine_->new_session(so);
  }

  int64_t n_ctx() const override { return session_->n_ctx(); }
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const override {
    return engine_->tokenizer().encode(text, parse_special);
  }
  std::string piece(int32_t id) const override { return engine_->tokenizer().token_to_piece(id); }
  bool is_stop(int32_t id) const override { return engine_->is_stop_token(id); }
  std::string model_name() const override { return engine_->info().model_name; }

  const std::vector<int32_t>& tokens() const override { return session_->tokens(); }
  SyncStats sync(std::span<const int32_t> tokens, const std::atomic<bool>* cancel) override {
    EvalOptions eo;
    eo.cancel = cancel;
    EvalResult r = session_->sync(tokens, eo);
    return SyncStats{r.reused, r.evaluated + r.replayed, r.cancelled, r.seconds};
  }
  void set_sampler(const SamplerConfig& config) override { session_->set_sampler(config); }
  int32_t sample(const SampleOptions& options) override { return session_->sample(options); }
  Logprobs logprobs(int32_t chosen, int32_t n_top) const override { return session_->logprobs(chosen, n_top); }
  void append(int32_t id) override { session_->eval(std::span<const int32_t>(&id, 1)); }

 private:
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<Session> session_;
};

}  // namespace

std::unique_ptr<InferenceModel> make_session_model(std::shared_ptr<const Engine> engine, int64_t n_ctx) {
  return std::make_unique<SessionModel>(std::move(engine), n_ctx);
}

}  // namespace ds4::server
