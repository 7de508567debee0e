#pragma once
// top-p without sorting the vocabulary. The nucleus is a prefix of the (logit desc, id asc)
// order, and weights never increase along that order, so a radix selection on the bits of the
// float weight finds the boundary: mass histograms narrow it to the tokens sharing one fine
// weight bucket, and only those are sorted. O(n) per call instead of O(n log n).
#include "sampling/logit_row.h"

#include <bit>
#include <cstdint>
#include <vector>

namespace ds4::sampling {

// Distance of a weight in [0, 1] below 1.0 in float bit patterns: 0 for 1.0, grows as the
// weight shrinks (IEEE order of positive floats matches their bit order). A weight that rounded
// above 1 counts as 1.
inline uint32_t weight_rank(float w) {
  const int32_t gap = static_cast<int32_t>(std::bit_cast<uint32_t>(1.0f)) -
                      static_cast<int32_t>(std::bit_cast<uint32_t>(w));
  return gap < 0 ? 0u : static_cast<uint32_t>(gap);
}

// Level-1 bucket: exponent and top 2 mantissa bits of the weight (quarter octaves), 0..508.
inline uint32_t coarse_bucket(float w) { return weight_rank(w) >> 21; }
constexpr uint32_t kCoarseBuckets = 512;

// Keeps exactly the tokens of `c` that lie in the shortest prefix, in sampling::better() order,
// whose weight sum reaches `target` (all of `c` if the sum never does). Leaves `c` unordered.
void keep_nucleus(std::vector<Candidate>& c, double target);

}  // namespace ds4::sampling
