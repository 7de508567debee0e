#pragma once
// Hugging Face Qwen3.5/3.6 MoE checkpoint (`qwen3_5_moe`, its text model) -> qwen35moe GGUF
// with the tensor names, layouts and metadata keys llama.cpp's converter and loader use:
// value heads of the DeltaNet layers reordered from grouped to tiled order, zero-centred
// RMSNorm weights stored as 1 + w (not the gated DeltaNet norm), A_log stored as -exp(A_log),
// the conv kernel squeezed to [kernel, channels], stacked experts split into gate / up / down.
#include <string>

#include "convert/convert_hf.h"
#include "convert/synth.h"
#include "tokenizer/vocab.h"

namespace ds4::convert {

// True when config.json describes a qwen3_5_moe model (text or the multimodal wrapper).
bool is_qwen35moe_config(const std::string& config_path);

// convert_hf for qwen35moe checkpoints (same options, same guarantees: everything validated
// before a byte is written; recipes f32, f16, q8_0).
ConvertReport convert_qwen35moe(const ConvertOptions& o);

// `ds4-gguf synth --preset qwen36-q4`: the tensor table and metadata of Qwen3.6-35B-A3B's
// published Q4 GGUF (Q4_K matrices and experts, Q6_K output, F32 routers, DeltaNet gates,
// norms) for the first `layers` layers, with seeded random values of a trained model's order,
// quantized by ds4's (ggml bit-exact) quantizers. For benchmarks and loaders; byte vocabulary.
struct QwenSynthOptions {
  std::string out_path;
  uint32_t layers = 4;
  uint64_t seed = 1;
  Recipe recipe = Recipe::FlashQ4;
  int threads = 0;
  // Experts: the routed experts (ffn_*_exps) are file holes (zeros); All: every tensor is. The
  // tensor table and metadata are the same, so a full 40-layer file can be checked in a test.
  Sparse sparse = Sparse::None;
  std::function<void(std::string_view)> log;
};
struct QwenSynthReport {
  size_t n_tensors = 0;
  uint64_t data_bytes = 0;
};
QwenSynthReport synth_qwen36(const QwenSynthOptions& o);

}  // namespace ds4::convert
