// compute_logprobs: log-softmax of the raw logits plus the N most likely tokens.
#include "core/error.h"
#include "sampling/exp_weights.h"
#include "sampling/logit_row.h"

#include <ds4/sampling.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ds4 {

Logprobs compute_logprobs(std::span<const float> logits, int32_t chosen, int32_t n_top) {
  const sampling::RowStats stats = sampling::scan_row(logits, "compute_logprobs");
  if (chosen < 0 || static_cast<size_t>(chosen) >= logits.size())
    fail("compute_logprobs: chosen token {} is outside the vocabulary [0, {})", chosen, logits.size());
  if (n_top < 0) fail("compute_logprobs: n_top = {} is negative", n_top);

  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const float max_logit = stats.max;
  // Terms are exp(l - max) <= 1 in float (relative error < 3e-7 each; NaN / -inf give 0); the
  // sum over 129280 of them is kept in double so accumulation adds nothing noticeable on top.
  // Chunks keep the vectorized exp's output on the stack.
  double sum = 0.0;
  constexpr size_t kChunk = 1024;
  float w[kChunk];
  for (size_t off = 0; off < logits.size(); off += kChunk) {
    const size_t n = std::min(kChunk, logits.size() - off);
    sampling::exp_weights(logits.data() + off, n, max_logit, 1.0f, w);
    sum += sampling::sum_weights(w, n);
  }
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  auto logprob_of = [&](float l) {
    return l > kNegInf ? static_cast<float>(static_cast<double>(l) - log_z) : kNegInf;
  };

  Logprobs out;
  out.chosen = {chosen, logprob_of(logits[static_cast<size_t>(chosen)])};
  if (n_top > 0) {
    std::vector<sampling::Candidate> best;
    sampling::select_best(logits, stats.n_finite, n_top, best);
    std::sort(best.begin(), best.end(), sampling::better);
    out.top.reserve(best.size());
    for (const auto& c : best) out.top.push_back({c.id, logprob_of(c.logit)});
  }
  return out;
}

}  // namespace ds4
