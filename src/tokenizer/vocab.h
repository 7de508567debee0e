#pragma once
// A byte-level BPE vocabulary as stored in GGUF (tokenizer.ggml.*), plus the HF added-token
// flags that GGUF has no standard key for. Loaded from a GGUF file or from HF tokenizer.json;
// written to GGUF by `ds4-gguf vocab-from-hf`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf {
class File;
class Writer;
}  // namespace ds4::gguf

namespace ds4::tokenizer {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// HF AddedToken flags, stored as a bit set in tokenizer.ds4.added_token_flags.
enum AddedFlag : uint8_t {
  kLstrip = 1, kRstrip = 2, kSingleWord = 4, kNormalized = 8, kSpecial = 16,
};

struct AddedToken {
  int32_t id = 0;
  uint8_t flags = 0;
};

// Which pre-tokenizer splits text before BPE (tokenizer.ggml.pre as llama.cpp names them):
// DeepSeek V3/V4's three regexes ("joyai-llm", "deepseek-v3"), Qwen2/Qwen3's single regex
// ("qwen2": digits one by one, letters \p{L}+), or Qwen3.5's ("qwen35": letters and marks
// [\p{L}\p{M}]+ join, so combining marks stay inside words).
enum class PreTokenizerKind : uint8_t { DeepSeekV3, Qwen2, Qwen35 };
// The tokenizer.ggml.pre value written for a kind.
std::string_view pre_tokenizer_name(PreTokenizerKind k);

struct Vocab {
  std::vector<std::string> tokens;         // index = id; byte-level text for normal tokens
  std::vector<TokenType> types;            // same size as tokens
  std::vector<std::string> merges;         // "left right", rank = index
  std::vector<AddedToken> added;           // tokens the added-token splitter looks for
  std::optional<int32_t> bos, eos;
  PreTokenizerKind pre = PreTokenizerKind::DeepSeekV3;
  // Unicode NFC normalization of plain text before pre-tokenization (HF's "NFC" normalizer,
  // which Qwen's tokenizer.json has; llama.cpp does not normalize).
  bool nfc = false;

  // Throws ds4::Error if ids, sizes or merges are inconsistent (`what` names the source).
  void validate(std::string_view what) const;
  std::optional<int32_t> find(std::string_view text) const;  // linear; for tools and tests
};

// GGUF keys (tokenizer.ggml.* as llama.cpp writes them, tokenizer.ds4.* our own).
inline constexpr const char* kKeyModel = "tokenizer.ggml.model";
inline constexpr const char* kKeyPre = "tokenizer.ggml.pre";
inline constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kKeyTokenType = "tokenizer.ggml.token_type";
inline constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
inline constexpr const char* kKeyBos = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kKeyEos = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kKeyAddedIds = "tokenizer.ds4.added_token_ids";
inline constexpr const char* kKeyAddedFlags = "tokenizer.ds4.added_token_flags";
inline constexpr const char* kKeyNormalizer = "tokenizer.ds4.normalizer";  // "nfc" / "none"; absent: NFC for Qwen

// Reads the vocabulary keys of a GGUF file. Without tokenizer.ds4.* keys (files converted by
// other tools), every Control/UserDefined token is an added token with default flags.
Vocab vocab_from_gguf(const gguf::File& file);

// Adds the vocabulary keys to a writer (before write_header()).
void vocab_to_gguf(const Vocab& vocab, gguf::Writer& writer);

// Parses HF tokenizer.json. Refuses anything whose behaviour we would not reproduce exactly
// (other normalizers, pre-tokenizers, model options). With v4_specials, adds the DeepSeek V4
// tokens of v4_specials.h that the file lacks. Gaps in the id space become "[PAD<id>]" Unused.
Vocab vocab_from_hf_json(const std::string& path, bool v4_specials);
Vocab vocab_from_hf_json_text(std::string_view json_text, const std::string& name_for_errors, bool v4_specials);

}  // namespace ds4::tokenizer
