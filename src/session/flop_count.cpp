// FlopCount (include/ds4/engine.h): the attention work a query does at a position, and a
// prompt's total, from the shapes the plan recorded.
#include <algorithm>

#include "ds4/engine.h"

namespace ds4 {

double FlopCount::attention(int64_t pos) const {
  if (pos < 0) return 0;
  const double per_row = 4.0 * static_cast<double>(n_head * head_dim);  // a score and a weighted sum per head
  double rows = 0, indexer = 0;
  for (const int32_t r : ratios) {
    rows += static_cast<double>(std::min<int64_t>(window, pos + 1));
    if (r <= 0) continue;
    const int64_t n = (pos + 1) / r;  // compressed rows complete at pos
    if (r == 4 && n > indexer_top_k) {  // ratio-4 layers carry the indexer (deepseek4/weights.cpp)
      rows += static_cast<double>(indexer_top_k);
      indexer += 2.0 * static_cast<double>(indexer_heads * indexer_dim) * static_cast<double>(n);
    } else {
      rows += static_cast<double>(n);
    }
  }
  return rows * per_row + indexer;
}

double FlopCount::prompt(int64_t first, int64_t n) const {
  double total = head * (n > 0 ? 1.0 : 0.0);
  for (int64_t p = first; p < first + n; ++p) total += matrix_per_token + attention(p);
  return total;
}

}  // namespace ds4
