#include "stream/synthetic_routing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ds4::stream {

namespace {

// splitmix64's finalizer: a well-mixed 64-bit function of its input.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One hash per (seed, purpose, layer, slot, position, attempt): independent draws for each.
uint64_t hash(uint64_t seed, uint64_t tag, int64_t layer, int64_t slot, int64_t pos, uint64_t attempt = 0) {
  uint64_t h = mix(seed ^ (tag << 56));
  h = mix(h ^ static_cast<uint64_t>(layer));
  h = mix(h ^ static_cast<uint64_t>(slot));
  h = mix(h ^ static_cast<uint64_t>(pos));
  return mix(h ^ attempt);
}

enum : uint64_t { kRenew = 1, kPick = 2, kPerm = 3, kGuessKind = 4, kGuessPick = 5 };

// A probability as a threshold over [0, 2^64): draw < threshold happens with probability p.
uint64_t threshold(double p) {
  if (p <= 0) return 0;
  if (p >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(p, 64));
}

}  // namespace

ZipfRouter::ZipfRouter(const ZipfRoutingParams& p) : p_(p) {
  if (p.n_layer <= 0 || p.n_expert <= 0 || p.k <= 0 || p.k > p.n_expert)
    fail("synthetic routing: bad geometry ({} layers, {} experts, k {})", p.n_layer, p.n_expert, p.k);
  // reuse < 1 bounds the backward search for a slot's last renewal (expected 1 / (1 - reuse) steps).
  if (!(p.zipf >= 0) || !(p.reuse >= 0 && p.reuse <= 0.99) || !(p.guess_recall >= 0 && p.guess_recall <= 1))
    fail("synthetic routing: zipf {} (>= 0), reuse {} (0..0.99), guess recall {} (0..1)", p.zipf, p.reuse,
         p.guess_recall);
  const size_t E = static_cast<size_t>(p.n_expert);
  std::vector<double> c(E);
  double acc = 0;
  for (size_t i = 0; i < E; ++i) c[i] = acc += 1.0 / std::pow(static_cast<double>(i + 1), p.zipf);
  cdf_.resize(E);
  for (size_t i = 0; i < E; ++i) cdf_[i] = threshold(c[i] / acc);
  cdf_.back() = UINT64_MAX;  // every draw lands on some rank
  // A random rank order per layer (Fisher-Yates on the hash), so hot experts differ by layer.
  perm_.resize(static_cast<size_t>(p.n_layer) * E);
  for (int64_t il = 0; il < p.n_layer; ++il) {
    int32_t* q = perm_.data() + static_cast<size_t>(il) * E;
    for (size_t i = 0; i < E; ++i) q[i] = static_cast<int32_t>(i);
    for (size_t i = E - 1; i > 0; --i) std::swap(q[i], q[hash(p.seed, kPerm, il, 0, 0, i) % (i + 1)]);
  }
  renew_below_ = threshold(1.0 - p.reuse);
}

int32_t ZipfRouter::popular(int64_t layer, uint64_t r) const {
  const size_t rank = static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), r) - cdf_.begin());
  return perm_[static_cast<size_t>(layer * p_.n_expert) + std::min(rank, cdf_.size() - 1)];
}

void ZipfRouter::route(int64_t pos, int64_t layer, int32_t* out) const {
  if (pos < 0 || layer < 0 || layer >= p_.n_layer) fail("synthetic routing: position {}, layer {}", pos, layer);
  const uint64_t seed = p_.seed;
  for (int64_t i = 0; i < p_.k; ++i) {
    int64_t r = pos;  // the slot's last renewal at or before pos (position 0 always renews)
    while (r > 0 && hash(seed, kRenew, layer, i, r) >= renew_below_) --r;
    int32_t e = -1;
    // A slot whose draw is taken by an earlier slot draws again (as top-k gives distinct ids).
    for (uint64_t a = 0; a < 64 && e < 0; ++a) {
      const int32_t c = popular(layer, hash(seed, kPick, layer, i, r, a));
      if (std::find(out, out + i, c) == out + i) e = c;
    }
    for (int64_t rank = 0; e < 0; ++rank) {  // practically never: the most popular free expert
      const int32_t c = perm_[static_cast<size_t>(layer * p_.n_expert + rank)];
      if (std::find(out, out + i, c) == out + i) e = c;
    }
    out[i] = e;
  }
}

std::vector<int32_t> ZipfRouter::route(int64_t pos, int64_t layer) const {
  std::vector<int32_t> v(static_cast<size_t>(p_.k));
  route(pos, layer, v.data());
  return v;
}

std::vector<int32_t> ZipfRouter::guess(int64_t pos, int64_t layer, int64_t n) const {
  const std::vector<int32_t> truth = route(pos, layer);
  std::vector<int32_t> pool = truth, g;
  const uint64_t hit_below = threshold(p_.guess_recall);
  auto free = [&](int32_t e) {
    return std::find(truth.begin(), truth.end(), e) == truth.end() && std::find(g.begin(), g.end(), e) == g.end();
  };
  n = std::min(n, p_.n_expert);
  for (int64_t j = 0; j < n; ++j) {
    // Whether guess j is right is decided once, so the share of right guesses is the recall.
    if (!pool.empty() && hash(p_.seed, kGuessKind, layer, j, pos) < hit_below) {
      const size_t at = static_cast<size_t>(hash(p_.seed, kGuessPick, layer, j, pos) % pool.size());
      g.push_back(pool[at]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(at));
      continue;
    }
    int32_t e = -1;  // a wrong guess: a popular expert outside the truth
    for (uint64_t a = 0; a < 64 && e < 0; ++a) {
      const int32_t c = popular(layer, hash(p_.seed, kGuessPick, layer, j, pos, a));
      if (free(c)) e = c;
    }
    for (int64_t rank = 0; e < 0 && rank < p_.n_expert; ++rank) {
      const int32_t c = perm_[static_cast<size_t>(layer * p_.n_expert + rank)];
      if (free(c)) e = c;
    }
    if (e >= 0) g.push_back(e);
  }
  return g;
}

std::optional<uint64_t> parse_bench_routing(const std::string& spec) {
  if (spec.empty()) return std::nullopt;
  if (spec == "zipf") return 1;
  if (spec.rfind("zipf:", 0) == 0 && spec.size() > 5 &&
      spec.find_first_not_of("0123456789", 5) == std::string::npos && spec.size() <= 5 + 19)
    return std::stoull(spec.substr(5));
  fail("--bench-routing '{}': expected zipf or zipf:SEED (SEED a decimal number)", spec);
}

}  // namespace ds4::stream
