#pragma once
// ModelSide over the in-process engine: one ds4::Session whose tokens are exactly the history.
#include <memory>

#include "agent/model_side.h"
#include "ds4/engine.h"
#include "ds4/session.h"

namespace ds4::agent {

class EngineModel final : public ModelSide {
 public:
  // n_ctx 0: the engine's context. Throws ds4::Error when the model has no tokenizer.
  EngineModel(std::shared_ptr<const Engine> engine, int64_t n_ctx, const SamplerConfig& sampling);

  std::string model_name() const override;
  std::string model_id() const override;
  int64_t n_ctx() const override;
  int64_t n_past() const override;
  const std::string& text() const override { return text_; }

  PrefillStats append(const chat::MarkedText& text, const EvalControl& control) override;
  PrefillStats resync(const chat::MarkedText& text, const EvalControl& control) override;
  GenStats generate(const GenParams& params, const PieceFn& on_piece) override;
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;
  void set_sampler(const SamplerConfig& config) override;

  // TEST SCAFFOLDING (script_model.h): "generates" `forced` — its tokens are evaluated and
  // handed on as if sampled; the forced text ends as if a stop token followed.
  GenStats generate_forced(std::string_view forced, const GenParams& params, const PieceFn& on_piece);

 private:
  std::vector<int32_t> tokenize(const chat::MarkedText& text) const;
  EvalOptions eval_options(const EvalControl& c) const;

  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<Session> session_;
  std::string text_;
};

}  // namespace ds4::agent
