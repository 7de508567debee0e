#pragma once
// DeepSeek V4 tokens that the V3 tokenizer.json lacks, with the ids `vocab-from-hf
// --v4-specials` gives them. Only <think>, </think> and ｜DSML｜ have ids reported by other code
// (spec section 9.1: 128821, 128822, 128825); the rest are placed in the free ids around them and
// are NOT verified against a real V4 vocabulary. HF tokenizers numbers added tokens
// consecutively (it ignores the id field of tokenizer.json), so the table has no gaps and id
// 128824 holds a filler token of our own naming. A real V4 GGUF carries its own tokens, and
// special ids are always looked up by string, so these guesses matter only for files we make.
// tools/oracle/tokenizer/v4_added_tokens.json holds the same table for the HF reference run.
#include <cstdint>
#include <span>
#include <string_view>

namespace ds4::tokenizer {

struct V4Special {
  int32_t id;
  std::string_view content;
  bool id_reported;  // id reported by third-party code (spec); false = our placement
};

std::span<const V4Special> v4_specials();

}  // namespace ds4::tokenizer
