#pragma once
// Finds added tokens (specials such as <｜User｜>) in text the way HF's AddedVocabulary does:
// leftmost-longest, non-overlapping matching, first for tokens with normalized=false over the
// whole text, then for normalized=true tokens inside the gaps (our normalizer is the identity,
// but the two passes still decide which token wins an overlap). Honours lstrip, rstrip and
// single_word.
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace ds4::tokenizer {

struct Segment {
  int32_t id;  // token id, or -1 for ordinary text
  uint32_t begin;
  uint32_t end;
};

class AddedTokens {
 public:
  explicit AddedTokens(const Vocab& vocab);
  bool empty() const { return passes_[0].tokens.empty() && passes_[1].tokens.empty(); }

  // Splits text into token matches and ordinary-text gaps, in order.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Trie {
    std::vector<int32_t> terminal;                 // node -> token id or -1
    std::unordered_map<uint64_t, int32_t> edges;   // (node << 8 | byte) -> child
    int32_t root_child[256];
    std::vector<int32_t> tokens;
    std::vector<uint8_t> flags;                    // per token index in `tokens`
    std::unordered_map<int32_t, uint8_t> flags_of;
    Trie();
    void add(std::string_view text, int32_t id, uint8_t flags);
    // Longest token starting at text[pos]; returns its length (0 if none) and id.
    size_t longest(std::string_view text, size_t pos, int32_t* id) const;
  };

  void run_pass(const Trie& trie, std::string_view text, uint32_t base, std::vector<Segment>& out) const;

  Trie passes_[2];  // [0] normalized=false, [1] normalized=true
};

}  // namespace ds4::tokenizer
