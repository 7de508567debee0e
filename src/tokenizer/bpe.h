#pragma once
// Byte-level BPE merge engine. Merges pieces of one pre-tokenized word by lowest rank, ties to
// the leftmost pair, with HF tokenizers' exact queue discipline (see bpe.cpp).
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace ds4::tokenizer {

class Bpe {
 public:
  // Resolves every merge to token ids. Throws ds4::Error when a merge names a token the
  // vocabulary lacks or a byte has no byte-level token (as HF refuses such files).
  Bpe(const Vocab& vocab, std::string_view name_for_errors);

  // Appends the ids of one word (raw bytes; the byte-level mapping happens here).
  // Thread-safe. Short words are memoised, as HF does: text repeats words a lot.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

 private:
  struct Entry {
    uint64_t key;  // (left << 32) | right; kEmpty marks a free slot
    int32_t rank;
    int32_t result;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  const Entry* find(int32_t left, int32_t right) const;
  void merge_word(std::string_view bytes, std::vector<int32_t>& out) const;
  void insert(int32_t left, int32_t right, int32_t rank, int32_t result);

  int32_t byte_token_[256];
  std::vector<Entry> table_;  // open addressing, power-of-two size
  uint64_t mask_ = 0;

  static constexpr size_t kCacheMaxWordBytes = 64;
  static constexpr size_t kCacheMaxEntries = 1 << 16;  // cleared when full
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace ds4::tokenizer
