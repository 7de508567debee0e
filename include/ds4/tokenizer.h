#pragma once
// Byte-level BPE tokenizer (design spec section 9.1), exact to HF tokenizers: DeepSeek V3/V4,
// and Qwen (tokenizer.ggml.pre "qwen2" / "qwen35", with HF's NFC normalization).
//
//   auto tok = ds4::Tokenizer::load("model.gguf");
//   std::vector<int32_t> ids = tok.encode(user_text, /*parse_special=*/false);
//   std::string bytes = tok.decode(ids);            // == user_text, byte for byte
//
// parse_special=false: the text is ordinary text; "<｜User｜>" or "｜DSML｜" typed by a user
// become ordinary BPE tokens. parse_special=true: added tokens (specials) are recognised
// first, as HF's Tokenizer.encode does by default; use it only for template-rendered text.
// No BOS is ever added. Any byte string is accepted: invalid UTF-8 is tokenized through the
// byte-level alphabet and decode() gives the same bytes back.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds4 {
namespace gguf {
class File;
}
namespace tokenizer {
struct Vocab;
}

class Tokenizer {
 public:
  // From the tokenizer.ggml.* keys of a GGUF file (a model or a vocabulary-only file).
  static Tokenizer load(const std::string& gguf_path);
  static Tokenizer from_gguf(const gguf::File& file);
  // From an HF tokenizer.json (v4_specials: add the DeepSeek V4 tokens it lacks).
  static Tokenizer from_hf_json(const std::string& path, bool v4_specials = false);
  static Tokenizer from_vocab(tokenizer::Vocab vocab, const std::string& name_for_errors);

  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
  void encode_append(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

  // Concatenated bytes of the tokens; throws ds4::Error on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes one token stands for (may be a partial UTF-8 sequence).
  const std::string& token_to_piece(int32_t id) const;
  // The token's text as stored in the vocabulary (byte-level form for ordinary tokens).
  const std::string& token_text(int32_t id) const;

  // Exact lookup of a token's vocabulary text, e.g. find_token("<｜User｜>").
  std::optional<int32_t> find_token(std::string_view text) const;
  int32_t n_vocab() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4
