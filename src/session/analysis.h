#pragma once
// Internal: model analysis for an Engine (EngineOptions::collect_imatrix, collect_expert_profile,
// prune_mask): the compute::AnalysisBackend configuration built from the model file, the
// statistics every session adds to, and their conversion to the quantize layer's file formats.
#include <memory>
#include <string>

#include "compute/analysis_backend.h"
#include "gguf/gguf.h"
#include "model/deepseek4/hparams.h"
#include "quantize/expert_profile.h"
#include "quantize/imatrix.h"

namespace ds4::session {

struct Analysis {
  std::shared_ptr<compute::AnalysisStats> stats = std::make_shared<compute::AnalysisStats>();
  std::shared_ptr<compute::AnalysisConfig> cfg = std::make_shared<compute::AnalysisConfig>();
  quantize::ModelKey key;
  std::string prune_method;   // "" without a mask
  int64_t pruned_experts = 0;
};

quantize::ModelKey model_key(const gguf::File& f, const model::deepseek4::HParams& hp);

// Call before the File moves into the Model (the tensor pointers stay valid across the move).
std::unique_ptr<Analysis> make_analysis(const gguf::File& f, const model::deepseek4::HParams& hp, bool imatrix,
                                        bool profile, const std::string& prune_mask_path);

quantize::Imatrix to_imatrix(const Analysis& a);
quantize::ExpertProfile to_profile(const Analysis& a);

}  // namespace ds4::session
