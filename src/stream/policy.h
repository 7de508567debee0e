#pragma once
// Eviction order of cached experts, shared by the live cache (cache.h) and the offline replay
// (replay.h) so the replay measures the policy the engine runs.
//
//   Lru: least recently selected first.
//   Hot: two segments. Experts selected in the last `recent_tokens` tokens (the current one and
//        the one before, by default) go only when no other can: consecutive tokens share
//        experts, and a long-memory count alone evicts a just-used expert that is not yet
//        popular. Among the rest, lowest decayed selection count first (every selection counts,
//        hit or miss; counts halve every `decay_tokens` tokens), ties broken by least recent
//        selection. Plain hit-count LFU evicts experts that are selected often but never get a
//        second hit (see ../shared/design/ssd-streaming-digest.md §2). The defaults (256, 2)
//        were chosen by replay (docs/BENCHMARKS.md, "the hot policy's recency segment"): with the
//        benchmark routing, halving every 16 tokens made the count mostly recency (67.8% hits at
//        28% of the experts, LRU 66.0%), and a longer memory alone was worse (64-65%) until
//        the previous token's experts were kept (72.5%).
// Protection (prefetch stamps) and pins are the caller's: it only asks "is a a better victim
// than b".
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::stream {

enum class PolicyKind { Lru, Hot };
PolicyKind parse_policy(std::string_view s);  // "lru" | "hot"; throws ds4::Error otherwise
const char* policy_name(PolicyKind k);

class EvictionPolicy {
 public:
  static constexpr int kDefaultDecayTokens = 256, kDefaultRecentTokens = 2;
  EvictionPolicy(PolicyKind kind, size_t n_ids, int decay_tokens = kDefaultDecayTokens,
                 int recent_tokens = kDefaultRecentTokens)
      : kind_(kind),
        decay_(decay_tokens > 0 ? decay_tokens : kDefaultDecayTokens),
        recent_(kind == PolicyKind::Hot && recent_tokens > 0 ? static_cast<uint64_t>(recent_tokens) : 0),
        score_(n_ids, -INFINITY),
        last_(n_ids, 0),
        last_token_(n_ids, 0) {}

  PolicyKind kind() const { return kind_; }
  // A selection of `id` at logical time `now`.
  void touch(size_t id, uint64_t now) {
    const double e = static_cast<double>(epoch());
    score_[id] = std::log2(hotness(id) + 1.0) + e;
    last_[id] = now;
    last_token_[id] = tokens_ + 1;  // + 1: 0 means never selected
  }
  // A prefetch of `id` at `now`: recent, and at least as hot as one selection, so a forecast
  // expert is not the first victim of the next insertion.
  void stamp(size_t id, uint64_t now) {
    if (hotness(id) < 1.0) score_[id] = static_cast<double>(epoch());
    last_[id] = std::max(last_[id], now);
  }
  void next_token() { ++tokens_; }
  // Decayed selection count now: halves every decay_tokens tokens.
  double hotness(size_t id) const { return std::exp2(score_[id] - static_cast<double>(epoch())); }
  uint64_t last_use(size_t id) const { return last_[id]; }
  // Eviction key: ordering by it is ordering by decayed count (all counts halve together, so
  // the order changes only on touch). Lru: 0 for all.
  double key(size_t id) const { return kind_ == PolicyKind::Hot ? score_[id] : 0.0; }
  // Hot: selected in the last recent_tokens tokens (the recency segment). Lru: never (its order
  // already puts them last).
  bool recent(size_t id) const { return last_token_[id] != 0 && last_token_[id] + recent_ > tokens_ + 1; }
  // true when a should be evicted before b.
  bool before(size_t a, size_t b) const {
    const bool ra = recent(a), rb = recent(b);
    if (ra != rb) return rb;
    const double ka = key(a), kb = key(b);
    if (ka != kb) return ka < kb;
    if (last_[a] != last_[b]) return last_[a] < last_[b];
    return a < b;
  }

 private:
  uint64_t epoch() const { return tokens_ / static_cast<uint64_t>(decay_); }
  PolicyKind kind_;
  int decay_;
  uint64_t recent_;
  uint64_t tokens_ = 0;
  std::vector<double> score_;  // log2(count at last touch) + epoch of last touch
  std::vector<uint64_t> last_;
  std::vector<uint64_t> last_token_;  // token count at the last selection + 1; 0: never
};

}  // namespace ds4::stream
