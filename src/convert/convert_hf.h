#pragma once
// Hugging Face DeepSeek V4 checkpoint directory -> deepseek4 GGUF (spec §1-§3).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/gguf_layout.h"

namespace ds4::convert {

struct ConvertOptions {
  std::string hf_dir;      // config.json + *.safetensors (+ optional index and tokenizer.json)
  std::string out_path;
  Recipe recipe = Recipe::F16;
  int threads = 0;         // quantization threads; 0 = all cores
  std::function<void(std::string_view)> log;  // progress lines; may be empty
};

struct ConvertReport {
  size_t n_tensors = 0;
  uint64_t data_bytes = 0;
  bool vocab_from_tokenizer_json = false;
  std::vector<std::string> notes;  // type fallbacks and ignored tensors
};

// Validates everything (config, every source tensor's name, dtype and shape, that every table
// entry has exactly one source and every source is used) before writing a byte; the output
// appears under out_path only when complete.
ConvertReport convert_hf(const ConvertOptions& o);

}  // namespace ds4::convert
