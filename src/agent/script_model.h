#pragma once
// TEST SCAFFOLDING (ds4-agent --debug-script FILE): a ModelSide that forces what the model
// "generates", so tests can drive the loop through paths a tiny random model never reaches
// (tool calls whose results decide the next step). The same idea as ds4-server's
// --debug-script, with the same file format:
//   {"rules": [{"when": "substring", "text": "forced output"}, ...]}
// Before each generation the first rule whose `when` occurs in the history after its last
// "<｜User｜>" (the latest user message or tool results) applies; its text is tokenized and
// fed through the real engine as if sampled (evaluation, history, save/load all run as usual)
// and ends as if a stop token followed. No rule matches: the engine samples normally.
#include <string>
#include <vector>

#include "agent/engine_model.h"

namespace ds4::agent {

struct ScriptRule {
  std::string when;
  std::string text;
};

// Throws ds4::Error naming the file and the bad field.
std::vector<ScriptRule> load_script(const std::string& path);

class ScriptModel final : public ModelSide {
 public:
  ScriptModel(EngineModel& inner, std::vector<ScriptRule> rules) : inner_(inner), rules_(std::move(rules)) {}

  std::string model_name() const override { return inner_.model_name(); }
  std::string model_id() const override { return inner_.model_id(); }
  int64_t n_ctx() const override { return inner_.n_ctx(); }
  int64_t n_past() const override { return inner_.n_past(); }
  const std::string& text() const override { return inner_.text(); }
  PrefillStats append(const chat::MarkedText& text, const EvalControl& control) override {
    return inner_.append(text, control);
  }
  PrefillStats resync(const chat::MarkedText& text, const EvalControl& control) override {
    return inner_.resync(text, control);
  }
  GenStats generate(const GenParams& params, const PieceFn& on_piece) override;
  void save_state(const std::string& path) const override { inner_.save_state(path); }
  void load_state(const std::string& path) override { inner_.load_state(path); }
  void set_sampler(const SamplerConfig& config) override { inner_.set_sampler(config); }

 private:
  EngineModel& inner_;
  std::vector<ScriptRule> rules_;
};

}  // namespace ds4::agent
