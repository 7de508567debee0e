#pragma once
// Shared test data: the DeepSeek tokenizer (built from the real tokenizer.json and loaded back
// through a vocabulary-only GGUF, the path the engine uses) and the parity corpus.
#include <optional>
#include <string>
#include <vector>

#include "ds4/tokenizer.h"

namespace ds4::test {

std::string tokenizer_json_path();

// Loaded once per process. v4 = with the DeepSeek V4 tokens added (--v4-specials).
const Tokenizer& deepseek_tokenizer(bool v4);

struct CorpusLine {
  std::string bytes;   // the text, or the decoded b64 bytes
  bool valid_text;     // false for {"b64": ...} lines (invalid UTF-8; no HF reference)
  std::optional<std::vector<int32_t>> plain, special, v4;  // HF reference ids
};
const std::vector<CorpusLine>& corpus();

std::string base64_decode(const std::string& in);

}  // namespace ds4::test
