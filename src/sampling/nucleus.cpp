#include "sampling/nucleus.h"

#include <algorithm>

namespace ds4::sampling {
namespace {

// Shortest prefix of `c` in better() order reaching `target`, sorting only as deep as needed
// (geometrically growing partial sorts). Used on the few tokens left after the radix passes,
// or on many when the weights are all equal (a flat row), where it degrades gracefully.
void keep_sorted_prefix(std::vector<Candidate>& c, double target) {
  const size_t n = c.size();
  double mass = 0.0;
  size_t sorted = 0;
  size_t chunk = 64;
  while (sorted < n) {
    const size_t end = std::min(n, sorted + chunk);
    std::partial_sort(c.begin() + static_cast<ptrdiff_t>(sorted), c.begin() + static_cast<ptrdiff_t>(end),
                      c.end(), better);
    for (size_t i = sorted; i < end; ++i) {
      mass += c[i].weight;
      if (mass >= target) {
        c.resize(i + 1);
        return;
      }
    }
    sorted = end;
    chunk *= 4;
  }
}

// One radix level: buckets key(w) in [0, n_buckets). Moves every candidate of a bucket before
// the cut bucket into `out`, leaves the cut bucket's candidates in `c`, drops the rest, and
// returns the target remaining for the cut bucket.
template <class Key>
double radix_level(std::vector<Candidate>& c, std::vector<Candidate>& out, double target, uint32_t n_buckets,
                   Key key) {
  std::vector<double> mass(n_buckets, 0.0);
  std::vector<uint32_t> count(n_buckets, 0);
  for (const Candidate& x : c) {
    mass[key(x.weight)] += x.weight;
    ++count[key(x.weight)];
  }
  uint32_t cut = n_buckets - 1;
  double before = 0.0;
  for (uint32_t b = 0; b < n_buckets; ++b) {
    // An empty bucket cannot hold the end of the prefix (matters when target <= 0).
    if (count[b] > 0 && before + mass[b] >= target) {
      cut = b;
      break;
    }
    before += mass[b];
  }
  size_t kept = 0;
  for (const Candidate& x : c) {
    const uint32_t b = key(x.weight);
    if (b < cut)
      out.push_back(x);
    else if (b == cut)
      c[kept++] = x;
  }
  c.resize(kept);
  return target - before;
}

}  // namespace

void keep_nucleus(std::vector<Candidate>& c, double target) {
  if (c.size() <= 256) {  // small sets: sorting is cheaper than histograms
    keep_sorted_prefix(c, target);
    return;
  }
  std::vector<Candidate> sure;  // tokens certainly inside the nucleus
  double rest = radix_level(c, sure, target, kCoarseBuckets, coarse_bucket);
  // Level 2: the next 10 bits of the rank split a quarter octave into 1024 parts (weights in
  // one part differ by under 0.03%), leaving a handful of tokens for the final sort.
  rest = radix_level(c, sure, rest, 1024, [](float w) { return (weight_rank(w) >> 11) & 1023u; });
  keep_sorted_prefix(c, rest);
  c.insert(c.end(), sure.begin(), sure.end());
}

}  // namespace ds4::sampling
