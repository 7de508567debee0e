#include "sampling/exp_weights.h"

#include "sampling/logit_row.h"

namespace ds4::sampling {

DS4_SAMPLING_CLONES void exp_weights(const float* __restrict row, size_t n, float max_logit, float inv_t,
                                     float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = softmax_weight(row[i], max_logit, inv_t);
}

}  // namespace ds4::sampling

namespace ds4::sampling {
namespace {

// Shared body of sum_weights / mass_at_least: 8 independent double lanes.
template <bool kMasked>
inline double lane_sum(const float* __restrict w, size_t n, float floor) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const float x = w[i + static_cast<size_t>(j)];
      acc[j] += static_cast<double>(kMasked ? (__builtin_isgreaterequal(x, floor) ? x : 0.0f) : x);
    }
  for (int j = 0; i < n; ++i, ++j) {
    const float x = w[i];
    acc[j] += static_cast<double>(kMasked ? (__builtin_isgreaterequal(x, floor) ? x : 0.0f) : x);
  }
  double total = 0.0;
  for (double a : acc) total += a;
  return total;
}

}  // namespace

DS4_SAMPLING_CLONES double sum_weights(const float* w, size_t n) { return lane_sum<false>(w, n, 0.0f); }

DS4_SAMPLING_CLONES double mass_at_least(const float* w, size_t n, float floor) {
  return lane_sum<true>(w, n, floor);
}

DS4_SAMPLING_CLONES size_t count_at_least(const float* __restrict x, size_t n, float floor) {
  uint32_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) c[j] += __builtin_isgreaterequal(x[i + static_cast<size_t>(j)], floor);
  size_t total = 0;
  for (; i < n; ++i) total += __builtin_isgreaterequal(x[i], floor);
  for (uint32_t v : c) total += v;
  return total;
}

}  // namespace ds4::sampling
