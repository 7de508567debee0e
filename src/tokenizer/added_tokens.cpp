#include "tokenizer/added_tokens.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace {

// Last / first code point of a string (both strings are pieces of valid text here; on
// invalid bytes we simply report "no code point").
bool last_cp(std::string_view s, uint32_t* cp) {
  if (s.empty()) return false;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80 && s.size() - i < 4) --i;
  const size_t n = utf8_valid_len(s, i);
  if (n == 0 || i + n != s.size()) return false;
  *cp = utf8_decode(s.data() + i, n);
  return true;
}

bool first_cp(std::string_view s, uint32_t* cp) {
  if (s.empty()) return false;
  const size_t n = utf8_valid_len(s, 0);
  if (n == 0) return false;
  *cp = utf8_decode(s.data(), n);
  return true;
}

// HF's single_word test looks for a word character next to the match with the Rust regex
// crate's \\w: Alphabetic, marks, decimal digits, connector punctuation and the two join
// controls. PCRE2's tables are older, so add the letters, marks and digits HF's newer tables know.
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || cp == '_';
  static pcre2_code* re = [] {
    const std::string p = std::string("^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}") +
                          PreTokenizer::class_extra("L") + PreTokenizer::class_extra("M") +
                          PreTokenizer::class_extra("N") + "]";  // the new N are decimal digits
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err,
                                  &off, nullptr);
    if (!c) ds4::fail("tokenizer: cannot compile the single_word character class");
    return c;
  }();
  std::string s;
  utf8_append(s, cp);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const bool m = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0;
  pcre2_match_data_free(md);
  return m;
}

// Start of the run of whitespace that ends s (s.size() if none).
size_t trailing_space_start(std::string_view s) {
  size_t i = s.size();
  uint32_t cp;
  while (i > 0 && last_cp(s.substr(0, i), &cp) && is_unicode_whitespace(cp)) {
    std::string tmp;
    utf8_append(tmp, cp);
    i -= tmp.size();
  }
  return i;
}

// Length of the run of whitespace that starts s.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  uint32_t cp;
  while (i < s.size() && first_cp(s.substr(i), &cp) && is_unicode_whitespace(cp)) i += utf8_valid_len(s, i);
  return i;
}

}  // namespace

AddedTokens::Trie::Trie() {
  terminal.push_back(-1);
  for (int32_t& c : root_child) c = -1;
}

void AddedTokens::Trie::add(std::string_view text, int32_t id, uint8_t f) {
  int32_t node = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    if (node == 0) {
      child = root_child[b];
    } else {
      auto it = edges.find((uint64_t(node) << 8) | b);
      if (it != edges.end()) child = it->second;
    }
    if (child < 0) {
      child = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      if (node == 0) root_child[b] = child;
      else edges.emplace((uint64_t(node) << 8) | b, child);
    }
    node = child;
  }
  terminal[size_t(node)] = id;
  tokens.push_back(id);
  flags.push_back(f);
  flags_of[id] = f;
}

size_t AddedTokens::Trie::longest(std::string_view text, size_t pos, int32_t* id) const {
  int32_t node = root_child[static_cast<uint8_t>(text[pos])];
  size_t best = 0;
  for (size_t i = pos + 1; node >= 0; ++i) {
    if (terminal[size_t(node)] >= 0) {
      best = i - pos;
      *id = terminal[size_t(node)];
    }
    if (i >= text.size()) break;
    auto it = edges.find((uint64_t(node) << 8) | static_cast<uint8_t>(text[i]));
    node = it == edges.end() ? -1 : it->second;
  }
  return best;
}

AddedTokens::AddedTokens(const Vocab& vocab) {
  for (const AddedToken& a : vocab.added)
    passes_[(a.flags & kNormalized) ? 1 : 0].add(vocab.tokens[size_t(a.id)], a.id, a.flags);
}

// One pass of HF's AddedVocabulary::find_matches over `text` (a gap at offset `base`).
void AddedTokens::run_pass(const Trie& trie, std::string_view text, uint32_t base, std::vector<Segment>& out) const {
  const auto gap = [&](size_t a, size_t b) { out.push_back({-1, base + uint32_t(a), base + uint32_t(b)}); };
  if (trie.tokens.empty()) {
    if (!text.empty()) gap(0, text.size());
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t id = -1;
    const size_t len = trie.longest(text, pos, &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // matching resumes after the match, whatever the strip flags absorb
    const uint8_t f = trie.flags_of.at(id);
    if (f & kSingleWord) {
      uint32_t cp;
      const bool start_space = start == 0 || !(last_cp(text.substr(0, start), &cp) && is_word_char(cp));
      const bool stop_space = stop == text.size() || !(first_cp(text.substr(stop), &cp) && is_word_char(cp));
      if (!start_space || !stop_space) continue;
    }
    if (f & kLstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (f & kRstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start) gap(start_offset, start);
    out.push_back({id, base + uint32_t(start), base + uint32_t(stop)});
    start_offset = stop;
  }
  if (start_offset < text.size()) gap(start_offset, text.size());
}

void AddedTokens::split(std::string_view text, std::vector<Segment>& out) const {
  std::vector<Segment> first;
  run_pass(passes_[0], text, 0, first);
  for (const Segment& s : first) {
    if (s.id >= 0) out.push_back(s);
    else run_pass(passes_[1], text.substr(s.begin, s.end - s.begin), s.begin, out);
  }
}

}  // namespace ds4::tokenizer
