#pragma once
// exp() for the softmax weights, written out so that (a) the loop over a 129280-entry row
// vectorizes (libm expf calls do not, and cost ~4 ns each) and (b) the result is the same bit
// pattern on every platform, which libm does not promise. Only x <= 0 is needed because every
// weight is exp((l - max) / T).
#include <bit>
#include <cstddef>
#include <cstdint>

namespace ds4::sampling {

// exp(x) for x <= 0 with relative error below 3e-7 (tested against std::exp in double).
// Results below 2^-126 (x < -87.3) flush to 0: such a token has under 1e-37 of the top token's
// probability. NaN and -inf give 0, which is how the sampler treats those logits anyway.
inline float exp_nonpositive(float x) {
  constexpr float kLowest = -87.0f;
  // A quiet comparison (no FP exception on NaN) lets the compiler turn the selects below into
  // masks instead of branches.
  const bool live = __builtin_isgreater(x, kLowest);  // false for NaN and -inf
  const float xc = live ? x : kLowest;
  // x = n ln2 + r with |r| <= ln2/2; ln2 split in two so n * kLn2Hi is exact (Cody-Waite).
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * kLog2e + kRound;  // n sits in the low mantissa bits of t
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  // Taylor series to r^7: truncation error |r|^8 / 8! < 6e-9 for |r| <= 0.347.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n from integer bits: n in [-126, 0] so n + 127 is a normal exponent field.
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);
  const float scale = std::bit_cast<float>((n_bits + 127u) << 23);
  return live ? p * scale : 0.0f;
}

// The softmax weight of one logit, exp((logit - max_logit) / T), computed as a product with
// inv_t = 1/T (a division per entry would double the cost of the whole-row pass). The top
// logit is special-cased to exactly 1 so a subnormal T (inv_t = inf) cannot give 0 * inf = NaN.
inline float softmax_weight(float logit, float max_logit, float inv_t) {
  const float d = logit - max_logit;
  return exp_nonpositive(d == 0.0f ? 0.0f : d * inv_t);
}

// out[i] = softmax_weight(row[i], max_logit, inv_t) for a whole row (vectorized).
void exp_weights(const float* __restrict row, size_t n, float max_logit, float inv_t, float* __restrict out);

// Sum of w[0..n) in double, accumulated in 8 interleaved lanes (lane j takes i % 8 == j) and
// then lane 0..7 in order: a fixed order, so the same on every platform, and vectorizable.
double sum_weights(const float* w, size_t n);

// Sum of the w[i] >= floor, same accumulation order as sum_weights.
double mass_at_least(const float* w, size_t n, float floor);

// Number of x[i] >= floor (NaN never counts). Lets collection loops skip whole blocks.
size_t count_at_least(const float* x, size_t n, float floor);

}  // namespace ds4::sampling
