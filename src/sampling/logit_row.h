#pragma once
// Shared passes over one row of logits: validation + max, and selection of the best n entries.
// Used by the sampler (top-k) and by logprobs (top-N), so both agree on ordering and on what
// counts as a usable logit.
#include <ds4/sampling.h>

#include <cstdint>
#include <span>
#include <vector>

// Whole-row loops get an AVX2 clone picked at load time (ifunc) on x86-64 GCC/Clang; the
// arithmetic is the same IEEE operations in both clones (no FMA: -ffp-contract=off), so results
// do not depend on which one runs.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(DS4_NO_CLONES)
#define DS4_SAMPLING_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DS4_SAMPLING_CLONES
#endif

namespace ds4::sampling {

using Candidate = detail::SampleCandidate;

struct RowStats {
  float max = 0.0f;       // largest finite logit
  int32_t argmax = -1;    // lowest id holding it
  int64_t n_finite = 0;   // logits that are neither NaN nor -inf
};

// One pass. Throws ds4::Error (prefixed with `who`) on an empty row, a row longer than int32
// ids can address, a +inf logit, or a row without any finite logit.
RowStats scan_row(std::span<const float> row, const char* who);

// The total order used everywhere: higher logit first, lower id first among equal logits.
inline bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Replaces `out` with the min(n, n_finite) best finite entries of `row` under better(), in no
// particular order (weight left 0). The row must have passed scan_row.
void select_best(std::span<const float> row, int64_t n_finite, int64_t n, std::vector<Candidate>& out);

}  // namespace ds4::sampling
