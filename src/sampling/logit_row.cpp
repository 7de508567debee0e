#include "sampling/logit_row.h"

#include "core/error.h"
#include "sampling/exp_weights.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace ds4::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kBlock = 4096;

struct BlockStats {
  float max;
  int64_t n_finite;
};

// Max (NaN-skipping) and count of entries above -inf for one block. Written with eight
// independent lanes so the compiler vectorizes it; a plain running max is a loop-carried float
// reduction that GCC will not vectorize without fast-math.
DS4_SAMPLING_CLONES BlockStats block_stats(const float* __restrict p, size_t n) {
  float m[8];
  int32_t c[8];
  for (int j = 0; j < 8; ++j) {
    m[j] = kNegInf;
    c[j] = 0;
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float l = p[i + j];
      m[j] = __builtin_isgreater(l, m[j]) ? l : m[j];
      c[j] += __builtin_isgreater(l, kNegInf);
    }
  }
  BlockStats b{kNegInf, 0};
  for (int j = 0; j < 8; ++j) {
    b.max = __builtin_isgreater(m[j], b.max) ? m[j] : b.max;
    b.n_finite += c[j];
  }
  for (; i < n; ++i) {
    b.max = __builtin_isgreater(p[i], b.max) ? p[i] : b.max;
    b.n_finite += __builtin_isgreater(p[i], kNegInf);
  }
  return b;
}

}  // namespace

RowStats scan_row(std::span<const float> row, const char* who) {
  if (row.empty()) fail("{}: empty logits row", who);
  if (row.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("{}: logits row of {} entries exceeds the int32 token id range", who, row.size());

  // Block maxima first (vectorized), then the first index of the maximum inside the first block
  // that reached it; NaN never compares greater, so it can neither be the max nor hide it.
  const size_t n = row.size();
  float best = kNegInf;
  size_t best_block = 0;
  int64_t n_finite = 0;
  for (size_t off = 0; off < n; off += kBlock) {
    const BlockStats b = block_stats(row.data() + off, std::min(kBlock, n - off));
    n_finite += b.n_finite;
    if (b.max > best) {
      best = b.max;
      best_block = off;
    }
  }
  if (!(best > kNegInf))
    fail("{}: no finite logit among {} (all are NaN or -inf); nothing can be sampled", who, n);
  size_t best_id = best_block;
  while (row[best_id] != best) ++best_id;
  if (std::isinf(best))
    fail("{}: logit of token {} is +inf; the model output overflowed and has no distribution", who,
         best_id);
  return RowStats{best, static_cast<int32_t>(best_id), n_finite};
}

void select_best(std::span<const float> row, int64_t n_finite, int64_t n, std::vector<Candidate>& out) {
  out.clear();
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(n, 0, n_finite));
  if (want == 0) return;

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

  // Small n (at most one per block of kFloorBlock): the want-th largest block maximum is a lower
  // bound for the want-th largest entry (it and the larger block maxima are `want` distinct
  // entries), so only entries at or above it can qualify. Two vectorized passes plus a
  // selection among a few times `want` candidates.
  constexpr size_t kFloorBlock = 256;
  const size_t n_blocks = (row.size() + kFloorBlock - 1) / kFloorBlock;
  if (want <= n_blocks) {
    std::vector<float> block_max(n_blocks);
    for (size_t b = 0; b < n_blocks; ++b) {
      const size_t off = b * kFloorBlock;
      block_max[b] = block_stats(row.data() + off, std::min(kFloorBlock, row.size() - off)).max;
    }
    std::nth_element(block_max.begin(), block_max.begin() + static_cast<ptrdiff_t>(want - 1), block_max.end(),
                     std::greater<float>());
    const float floor = block_max[want - 1];
    if (floor > kNegInf) {
      for (size_t off = 0; off < row.size(); off += kFloorBlock) {
        const size_t end = std::min(row.size(), off + kFloorBlock);
        if (count_at_least(row.data() + off, end - off, floor) == 0) continue;
        for (size_t i = off; i < end; ++i)
          if (row[i] >= floor) out.push_back({static_cast<int32_t>(i), row[i], 0.0f});
      }
      if (out.size() > want) {
        std::nth_element(out.begin(), out.begin() + static_cast<ptrdiff_t>(want), out.end(), better);
        out.resize(want);
      }
      return;
    }
  }

  // Otherwise keep a heap whose front is the worst kept entry; almost every element is rejected
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
