#pragma once
// deepseek4.* metadata keys (spec §1, plus what llama.cpp v0.5.0's loader requires) and the
// tokenizer.ggml.* vocabulary keys.
#include <cstdint>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "gguf/gguf.h"

namespace ds4::convert {

struct Vocab {
  std::string model = "gpt2";
  std::string pre = "joyai-llm";
  std::vector<std::string> tokens;   // index = token id
  std::vector<int32_t> token_types;  // llama.cpp: 1 normal, 3 control, 4 user defined, 5 unused
  std::vector<std::string> merges;   // "left right", rank = index
};

// GPT-2 byte-level alphabet: token i (< 256) is byte i mapped to its printable code point;
// ids 256.. are unused padding. Enough for llama.cpp to load random test models.
Vocab byte_vocab(uint32_t vocab_size);

// Vocabulary from a Hugging Face tokenizer.json (BPE model), padded with unused entries up to
// vocab_size. Throws when an id is >= vocab_size or the file is not a BPE tokenizer.
Vocab vocab_from_tokenizer_json(const std::string& path, uint32_t vocab_size);

void add_model_metadata(gguf::Writer& w, const ModelShape& s);
void add_vocab_metadata(gguf::Writer& w, const Vocab& v, const ModelShape& s);

}  // namespace ds4::convert
