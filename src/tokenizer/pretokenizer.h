#pragma once
// The DeepSeek V3/V4 ("joyai-llm") pre-tokenizer: three regexes applied in sequence, each
// splitting every piece produced so far into matched and unmatched parts and keeping both
// (HF Split, behaviour "Isolated"), then ByteLevel without its own regex. Spec section 9.1.
// The Qwen pre-tokenizers ("qwen2", "qwen35") are one such Split with Qwen's regex.
//
// HF runs these with Oniguruma; we run them with PCRE2 (UTF + UCP, JIT). Both are
// backtracking engines with leftmost-first alternation, so the only differences are the Unicode
// tables; see unicode_extras.inc for how the classes are made to agree.
//
// Input may be invalid UTF-8. HF cannot see such input (it takes Unicode strings), so there is
// no reference behaviour; ours: every maximal run of bytes that do not form valid UTF-8 is its
// own piece, and the valid runs between are pre-tokenized as if they were separate strings.
// The bytes then go through the byte-level alphabet like any others, so they round-trip.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ds4::tokenizer {

struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
};

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerKind kind = PreTokenizerKind::DeepSeekV3);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of text[0, text.size()) to out, as byte offsets into text, in order.
  // Pieces are never empty and tile the input exactly. Thread-safe.
  void split(std::string_view text, std::vector<Span>& out) const;

  // The PCRE2 source of regex i (DeepSeek: 0..2; Qwen: 0), and of the character classes it is
  // built from: "L" "N" "M" "P" "S" (bracket-free class bodies) and "s" (whitespace). For tests.
  static std::string pattern(int i, PreTokenizerKind kind = PreTokenizerKind::DeepSeekV3);
  static std::string class_body(std::string_view name);
  // Only the ranges added to PCRE2's \p{name} (code points HF's newer tables know).
  static std::string class_extra(std::string_view name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::tokenizer
