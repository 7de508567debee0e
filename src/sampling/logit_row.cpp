#include "sampling/logit_row.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ds4::sampling {

RowStats scan_row(std::span<const float> row, const char* who) {
  if (row.empty()) fail("{}: empty logits row", who);
  if (row.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("{}: logits row of {} entries exceeds the int32 token id range", who, row.size());

  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float best = kNegInf;
  int32_t best_id = -1;
  int64_t n_finite = 0;
  // `l > best` is false for NaN and for -inf, so neither can become the argmax; a +inf becomes
  // it and is reported below, which keeps the hot loop free of extra branches.
  const size_t n = row.size();
  for (size_t i = 0; i < n; ++i) {
    const float l = row[i];
    n_finite += l > kNegInf;
    if (l > best) {
      best = l;
      best_id = static_cast<int32_t>(i);
    }
  }
  if (best_id < 0)
    fail("{}: no finite logit among {} (all are NaN or -inf); nothing can be sampled", who, n);
  if (std::isinf(best))
    fail("{}: logit of token {} is +inf; the model output overflowed and has no distribution", who,
         best_id);
  return RowStats{best, best_id, n_finite};
}

void select_best(std::span<const float> row, int64_t n_finite, int64_t n, std::vector<Candidate>& out) {
  out.clear();
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(n, 0, n_finite));
  if (want == 0) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  if (want * 8 >= static_cast<size_t>(n_finite)) {
    // Large n: a heap would do O(V log n) work; a linear selection is cheaper.
    out.reserve(static_cast<size_t>(n_finite));
    for (size_t i = 0; i < row.size(); ++i)
      if (row[i] > kNegInf) out.push_back({static_cast<int32_t>(i), row[i], 0.0f});
    if (want < out.size()) {
      std::nth_element(out.begin(), out.begin() + static_cast<ptrdiff_t>(want), out.end(), better);
      out.resize(want);
    }
    return;
  }

  // Small n: keep a heap whose front is the worst kept entry; almost every element is rejected
  // by one comparison against it. Scanning ids upwards means an equal logit is always worse than
  // the kept one (higher id), so only a strictly larger logit displaces the front.
  out.reserve(want);
  size_t i = 0;
  for (; i < row.size() && out.size() < want; ++i)
    if (row[i] > kNegInf) out.push_back({static_cast<int32_t>(i), row[i], 0.0f});
  std::make_heap(out.begin(), out.end(), better);
  float floor = out.front().logit;
  for (; i < row.size(); ++i) {
    const float l = row[i];
    if (!(l > floor)) continue;  // also skips NaN
    std::pop_heap(out.begin(), out.end(), better);
    out.back() = {static_cast<int32_t>(i), l, 0.0f};
    std::push_heap(out.begin(), out.end(), better);
    floor = out.front().logit;
  }
}

}  // namespace ds4::sampling
