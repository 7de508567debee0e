#include "tokenizer/bpe.h"

#include <queue>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace ds4::tokenizer {
namespace {

uint64_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

Bpe::Bpe(const Vocab& vocab, std::string_view name) {
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(vocab.tokens.size() * 2);
  // Merges and bytes resolve to the BPE model's own tokens; an added token never takes part
  // in merging (HF keeps them apart), except where the same text is also a model token.
  for (size_t i = 0; i < vocab.tokens.size(); ++i)
    if (vocab.types[i] == TokenType::Normal || vocab.types[i] == TokenType::Byte ||
        vocab.types[i] == TokenType::Undefined)
      id_of.emplace(vocab.tokens[i], static_cast<int32_t>(i));
  for (size_t i = 0; i < vocab.tokens.size(); ++i) id_of.emplace(vocab.tokens[i], static_cast<int32_t>(i));

  const ByteLevel& bl = ByteLevel::get();
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(bl.byte_to_utf8[size_t(b)]);
    if (it == id_of.end()) ds4::fail("{}: vocabulary has no byte-level token for byte 0x{:02x}", name, b);
    byte_token_[b] = it->second;
  }

  size_t cap = 16;
  while (cap < vocab.merges.size() * 2) cap <<= 1;
  table_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  std::string joined;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
      ds4::fail("{}: merge {} \"{}\" is not \"left right\"", name, rank, m);
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left);
    joined.append(right);
    const auto l = id_of.find(left), r = id_of.find(right), j = id_of.find(joined);
    if (l == id_of.end() || r == id_of.end() || j == id_of.end())
      ds4::fail("{}: merge {} \"{}\" uses a token missing from the vocabulary (\"{}\")", name, rank, m,
                l == id_of.end() ? std::string(left) : r == id_of.end() ? std::string(right) : joined);
    // A repeated pair keeps its last rank, as HF's map construction does.
    insert(l->second, r->second, static_cast<int32_t>(rank), j->second);
  }
}

void Bpe::insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t h = hash_key(key) & mask_;; h = (h + 1) & mask_) {
    Entry& e = table_[h];
    if (e.key == kEmpty || e.key == key) {
      e = Entry{key, rank, result};
      return;
    }
  }
}

const Bpe::Entry* Bpe::find(int32_t left, int32_t right) const {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t h = hash_key(key) & mask_;; h = (h + 1) & mask_) {
    const Entry& e = table_[h];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t result;
};

// Lowest rank first, then lowest position: the order of HF's BinaryHeap of merges.
struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

}  // namespace

void Bpe::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  if (n > kCacheMaxWordBytes) {
    merge_word(bytes, out);
    return;
  }
  thread_local std::string key;
  key.assign(bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(bytes, out);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheMaxEntries) cache_.clear();
  cache_.emplace(key, std::vector<int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
}

void Bpe::merge_word(std::string_view bytes, std::vector<int32_t>& out) const {
  const size_t n = bytes.size();
  thread_local Scratch s;
  auto& sym = s.symbols;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = Symbol{byte_token_[static_cast<uint8_t>(bytes[i])], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1, true};

  auto& heap = s.heap;
  heap.clear();
  for (size_t i = 0; i + 1 < n; ++i)
    if (const Entry* e = find(sym[i].id, sym[i + 1].id)) heap.push_back({e->rank, int32_t(i), e->result});
  std::make_heap(heap.begin(), heap.end(), Later{});

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later{});
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[size_t(top.pos)];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t right_pos = cur.next;
    Symbol& right = sym[size_t(right_pos)];
    // HF's staleness test: the pair now at this position must still merge into the same token.
    // (It compares the result only, not the rank; we do the same so merge order matches.)
    const Entry* now = find(cur.id, right.id);
    if (!now || now->result != top.result) continue;

    cur.id = top.result;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = top.pos;

    if (cur.prev >= 0) {
      if (const Entry* e = find(sym[size_t(cur.prev)].id, cur.id)) {
        heap.push_back({e->rank, cur.prev, e->result});
        std::push_heap(heap.begin(), heap.end(), Later{});
      }
    }
    if (cur.next >= 0) {
      if (const Entry* e = find(cur.id, sym[size_t(cur.next)].id)) {
        heap.push_back({e->rank, top.pos, e->result});
        std::push_heap(heap.begin(), heap.end(), Later{});
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace ds4::tokenizer
