#pragma once
// Hugging Face Qwen3.5/3.6 MoE checkpoint (`qwen3_5_moe`, its text model) -> qwen35moe GGUF
// with the tensor names, layouts and metadata keys llama.cpp's converter and loader use:
// value heads of the DeltaNet layers reordered from grouped to tiled order, zero-centred
// RMSNorm weights stored as 1 + w (not the gated DeltaNet norm), A_log stored as -exp(A_log),
// the conv kernel squeezed to [kernel, channels], stacked experts split into gate / up / down.
#include <string>

#include "convert/convert_hf.h"
#include "tokenizer/vocab.h"

namespace ds4::convert {

// True when config.json describes a qwen3_5_moe model (text or the multimodal wrapper).
bool is_qwen35moe_config(const std::string& config_path);

// convert_hf for qwen35moe checkpoints (same options, same guarantees: everything validated
// before a byte is written; recipes f32, f16, q8_0).
ConvertReport convert_qwen35moe(const ConvertOptions& o);

}  // namespace ds4::convert
