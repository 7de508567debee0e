#pragma once
// deepseek4.* metadata keys (spec §1, plus what llama.cpp v0.5.0's loader requires) and the
// tokenizer.ggml.* vocabulary keys.
#include <cstdint>
#include <string>

#include "convert/hf_config.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace ds4::convert {

// The vocabulary type and its GGUF keys are the tokenizer module's (src/tokenizer/vocab.h), so
// the engine's Tokenizer::load reads back exactly what the converter writes.

// GPT-2 byte-level alphabet: token i (< 256) is byte i mapped to its printable code point
// (tokenizer::ByteLevel); ids 256.. are Unused "[PAD<id>]". No merges, no added tokens. Enough
// for llama.cpp to load random test models.
tokenizer::Vocab byte_vocab(uint32_t vocab_size);

// tokenizer::vocab_from_hf_json (DeepSeek V3/V4 byte-level BPE only; no V4 tokens added), then
// padded with Unused "[PAD<id>]" entries up to vocab_size, the embedding's row count. Throws when
// a token id is >= vocab_size or the file is not a tokenizer the engine reproduces exactly.
tokenizer::Vocab vocab_from_tokenizer_json(const std::string& path, uint32_t vocab_size);

void add_model_metadata(gguf::Writer& w, const ModelShape& s);
// Writes the vocabulary keys via tokenizer::vocab_to_gguf. BOS/EOS: config.json's ids when it
// has them (what the model was trained with), else the tokenizer's by-string lookup.
void add_vocab_metadata(gguf::Writer& w, tokenizer::Vocab v, const ModelShape& s);

}  // namespace ds4::convert
