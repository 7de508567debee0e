#include "ds4/tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <unordered_map>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace ds4 {

using namespace ds4::tokenizer;

struct Tokenizer::Impl {
  Vocab vocab;
  Bpe bpe;
  AddedTokens added;
  PreTokenizer pre;
  std::vector<std::string> pieces;  // decoded bytes per token
  std::unordered_map<std::string_view, int32_t> id_of;

  Impl(Vocab v, const std::string& name) : vocab(std::move(v)), bpe(vocab, name), added(vocab), pre(vocab.pre) {
    const ByteLevel& bl = ByteLevel::get();
    pieces.resize(vocab.tokens.size());
    id_of.reserve(vocab.tokens.size() * 2);
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      const std::string& t = vocab.tokens[i];
      id_of.emplace(t, static_cast<int32_t>(i));
      // HF's ByteLevel decoder: a token whose every code point is in the byte alphabet becomes
      // those bytes; any other token (e.g. one containing U+FF5C) is emitted as its own text.
      std::string bytes;
      bool all_mapped = utf8_is_valid(t);
      for (size_t k = 0; all_mapped && k < t.size();) {
        const size_t n = utf8_valid_len(t, k);
        const int b = bl.byte_of(utf8_decode(t.data() + k, n));
        if (b < 0) all_mapped = false;
        else bytes += static_cast<char>(b);
        k += n;
      }
      pieces[i] = all_mapped ? std::move(bytes) : t;
    }
  }

  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<Span> spans;
    thread_local std::string normalized;
    if (vocab.nfc && nfc(text, normalized)) text = normalized;
    spans.clear();
    pre.split(text, spans);
    for (const Span& s : spans) bpe.encode_word(text.substr(s.begin, s.end - s.begin), out);
  }

  // HF's NFC normalizer. HF tokenizers' tables (crate unicode-normalization-alignments) are
  // Unicode 9.0: a code point assigned later has no decomposition and combining class 0 there.
  // ICU's NFC filtered to the code points of Unicode 9.0 does exactly that (the others pass
  // through and end a normalization span); measured identical to HF on the parity corpus and
  // on every combining mark of ICU 72 in "a" + mark + U+0316 + U+0334 (922 probes; filters at
  // 10.0 and later differ on 12 or more). Only valid UTF-8 runs are normalized; invalid bytes
  // stay as they are. Returns false (out untouched) when the text is already NFC.
  static const icu::Normalizer2* hf_nfc() {
    static const icu::Normalizer2* n = [] {
      UErrorCode err = U_ZERO_ERROR;
      const icu::Normalizer2* base = icu::Normalizer2::getNFCInstance(err);
      if (U_FAILURE(err)) ds4::fail("tokenizer: ICU NFC normalizer unavailable: {}", u_errorName(err));
      auto* set = new icu::UnicodeSet(icu::UnicodeString(u"[:age=9.0:]"), err);
      if (U_FAILURE(err)) ds4::fail("tokenizer: ICU Unicode 9.0 set unavailable: {}", u_errorName(err));
      set->freeze();
      return static_cast<const icu::Normalizer2*>(new icu::FilteredNormalizer2(*base, *set));
    }();
    return n;
  }

  static bool nfc(std::string_view text, std::string& out) {
    bool ascii = true;
    for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return false;
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = hf_nfc();
    out.clear();
    bool changed = false;
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i;
      while (j < text.size()) {
        const size_t l = utf8_valid_len(text, j);
        if (l == 0) break;
        j += l;
      }
      if (j > i) {
        const icu::UnicodeString u =
            icu::UnicodeString::fromUTF8(icu::StringPiece(text.data() + i, static_cast<int32_t>(j - i)));
        if (n->isNormalized(u, err)) {
          out.append(text.substr(i, j - i));
        } else {
          std::string piece;
          icu::UnicodeString d;
          n->normalize(u, d, err);
          d.toUTF8String(piece);
          if (U_FAILURE(err)) ds4::fail("tokenizer: NFC normalization failed: {}", u_errorName(err));
          out += piece;
          changed = true;
        }
      }
      size_t k = j;
      while (k < text.size() && utf8_valid_len(text, k) == 0) ++k;
      out.append(text.substr(j, k - j));
      i = k;
    }
    return changed;
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_vocab(Vocab vocab, const std::string& name) {
  vocab.validate(name);
  return Tokenizer(std::make_unique<Impl>(std::move(vocab), name));
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) { return from_vocab(vocab_from_gguf(file), file.path()); }

Tokenizer Tokenizer::load(const std::string& path) { return from_gguf(gguf::File::open(path)); }

Tokenizer Tokenizer::from_hf_json(const std::string& path, bool v4_specials) {
  return from_vocab(vocab_from_hf_json(path, v4_specials), path);
}

void Tokenizer::encode_append(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  if (text.size() > 0xFFFFFFFFu) ds4::fail("tokenizer: input of {} bytes exceeds the 4 GiB limit", text.size());
  if (!parse_special || impl_->added.empty()) {
    impl_->encode_plain(text, out);
    return;
  }
  std::vector<Segment> segs;
  impl_->added.split(text, segs);
  for (const Segment& s : segs) {
    if (s.id >= 0) out.push_back(s.id);
    else impl_->encode_plain(text.substr(s.begin, s.end - s.begin), out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, parse_special, out);
  return out;
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->pieces.size())
    ds4::fail("tokenizer: token id {} outside the vocabulary of {}", id, impl_->pieces.size());
  return impl_->pieces[size_t(id)];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->vocab.tokens.size())
    ds4::fail("tokenizer: token id {} outside the vocabulary of {}", id, impl_->vocab.tokens.size());
  return impl_->vocab.tokens[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id);
  return out;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->id_of.find(text);
  if (it == impl_->id_of.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->vocab.bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->vocab.eos; }

}  // namespace ds4
