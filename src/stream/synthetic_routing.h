#pragma once
// Benchmark-only synthetic routing (issue 14): random synthetic weights route almost uniformly,
// which no expert cache can exploit, so benchmarks draw the learned layers' expert ids from
// per-layer Zipf-like popularity (a random rank order per layer) with token-to-token locality
// instead. One source serves the offline replay (replay.h synthetic_trace) and live engine runs
// (`--bench-routing zipf[:SEED]`, EngineOptions::bench_routing), so both see the same routing
// model and the calibration test of one holds for the other.
//
// Every result is a pure function of (seed, position, layer): no state is carried between
// calls, so repeated runs, prefill chunks of any size, rewinds, and resident vs streaming runs
// see identical ids. Locality without state: slot i of a layer keeps its expert from one
// position to the next unless that slot "renews" at the position (probability 1 - reuse, from a
// hash of (seed, layer, slot, position)); the expert of a slot is drawn from the popularity at
// its last renewal. Draws use integer thresholds (no float comparisons), so a device port would
// give the same ids.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds4::stream {

struct ZipfRoutingParams {
  int64_t n_layer = 43, n_expert = 256, k = 6;
  // Calibrated with the offline replay at Flash geometry (test_replay.cpp
  // SyntheticRoutingIsCalibrated): an LRU cache holding 28% of the experts hits 50-80% of
  // reads, the figure the Metal fork measured on real Flash traffic.
  double zipf = 0.8;          // popularity of rank r ~ 1 / r^zipf
  double reuse = 0.3;         // per slot and token: probability of keeping the previous token's expert
  double guess_recall = 0.5;  // lookahead guesses (guess()): each is a true expert with this probability
  uint64_t seed = 1;
};

class ZipfRouter {
 public:
  explicit ZipfRouter(const ZipfRoutingParams& p);
  const ZipfRoutingParams& params() const { return p_; }

  // The k distinct expert ids of `layer` at `pos` (slot order), pos >= 0.
  void route(int64_t pos, int64_t layer, int32_t* out) const;
  std::vector<int32_t> route(int64_t pos, int64_t layer) const;
  // A router-lookahead guess for `layer` at `pos`: n distinct ids, each one of route(pos, layer)
  // with probability guess_recall, else a popular expert outside it. Deterministic like route.
  std::vector<int32_t> guess(int64_t pos, int64_t layer, int64_t n) const;
  // The expert of `layer` that a 64-bit uniform draw r picks by popularity.
  int32_t popular(int64_t layer, uint64_t r) const;

 private:
  ZipfRoutingParams p_;
  std::vector<uint64_t> cdf_;   // n_expert cumulative thresholds over [0, 2^64)
  std::vector<int32_t> perm_;   // n_layer x n_expert: rank -> expert id
  uint64_t renew_below_ = 0;    // a slot renews when its hash is below this
};

// "zipf" or "zipf:SEED" -> the seed (1 by default); nullopt for "" (off). Throws ds4::Error on
// anything else.
std::optional<uint64_t> parse_bench_routing(const std::string& spec);

}  // namespace ds4::stream
