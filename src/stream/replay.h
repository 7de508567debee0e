#pragma once
// Offline evaluation of expert-cache policies on routing traces (trace.h): hit rate against
// budget for LRU, the engine's policy ("hot") and Belady's optimum (evict the expert whose next
// use is farthest away: the ceiling for any demand cache of that size), each with or without
// prefetch (hash layers, lookahead guesses recorded in the trace, eviction protect).
//
// The replay has no clock: a prefetched expert is counted as arriving in time. Its prefetch
// figures are therefore the coverage ceiling of the guesses, not a measure of I/O overlap.
//
// Also synthetic traces (synthetic_trace): the benchmark-only routing source of
// synthetic_routing.h (per-layer Zipf popularity with token-to-token locality, the one that
// `--bench-routing` feeds live runs) plus token ids for the hash layers.
#include <cstdint>
#include <string>
#include <vector>

#include "stream/policy.h"
#include "stream/synthetic_routing.h"
#include "stream/trace.h"

namespace ds4::stream {

struct ReplayConfig {
  int64_t slots = 0;  // cache capacity in experts
  bool belady = false;  // ignore `policy`, use the offline optimum (no prefetch)
  PolicyKind policy = PolicyKind::Lru;
  int decay_tokens = EvictionPolicy::kDefaultDecayTokens;
  int recent_tokens = EvictionPolicy::kDefaultRecentTokens;
  bool prefetch_hash = false;
  bool prefetch_lookahead = false;
  bool protect = false;
  int protect_tokens = 2;
};

struct ReplayResult {
  uint64_t tokens = 0, accesses = 0, hits = 0, misses = 0;
  uint64_t prefetch_issued = 0, prefetch_useful = 0, prefetch_wasted = 0;
  std::vector<uint64_t> layer_hits, layer_accesses;
  double hit_rate() const { return accesses ? static_cast<double>(hits) / static_cast<double>(accesses) : 0; }
  // Demand reads a prefetch saved, over all reads the demand would otherwise have made.
  double coverage() const {
    const uint64_t d = prefetch_useful + misses;
    return d ? static_cast<double>(prefetch_useful) / static_cast<double>(d) : 0;
  }
  double wasted_per_useful() const {
    return prefetch_useful ? static_cast<double>(prefetch_wasted) / static_cast<double>(prefetch_useful) : 0;
  }
};

ReplayResult replay(const Trace& t, const ReplayConfig& c);

struct SyntheticRouting {
  int64_t n_layer = 43, n_expert = 256, k = 6, n_hash_layers = 3;
  int64_t n_tokens = 512;
  int64_t n_vocab = 129280;
  // The learned layers' routing model (synthetic_routing.h, the defaults are its calibration).
  double zipf = ZipfRoutingParams{}.zipf;
  double reuse = ZipfRoutingParams{}.reuse;
  double token_zipf = 1.1;    // token-id popularity (drives the hash layers through tid2eid)
  int64_t guesses = 4;        // lookahead guesses per learned layer ('h' records)
  double guess_recall = ZipfRoutingParams{}.guess_recall;
  uint64_t seed = 1;
  ZipfRoutingParams router() const { return {n_layer, n_expert, k, zipf, reuse, guess_recall, seed}; }
};

// Flash geometry unless changed; deterministic for a seed.
Trace synthetic_trace(const SyntheticRouting& s);

}  // namespace ds4::stream
