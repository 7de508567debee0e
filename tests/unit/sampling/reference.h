#pragma once
// Independent oracles for the sampler tests: the filtered distribution and log-softmax computed
// the slow, obvious way in double precision (full sort, no thresholds in logit space, no partial
// sorts), straight from the rules written in include/ds4/sampling.h; plus goodness-of-fit
// statistics. Nothing here calls the code under test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace ds4::test {

// Deterministic test data that does not depend on the standard library's distributions (whose
// output is implementation-defined): Knuth's MMIX LCG, top 53 bits as a double in [0, 1).
class TestUniform {
 public:
  explicit TestUniform(uint64_t seed) : s_(seed) {}
  double next() {
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s_ >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t s_;
};

// Logits shaped like a language model's: a long flat tail and a few high entries.
// `peak` sets how many tokens stand out: about n * 0.29 / peak of them lie within 3 of the top.
inline std::vector<float> make_logits(size_t n, uint64_t seed, double spread = 10.0, double peak = 4.0) {
  TestUniform u(seed);
  std::vector<float> l(n);
  for (auto& x : l) {
    const double a = u.next();
    x = static_cast<float>(spread * std::pow(a, peak) - 2.0 * u.next());
  }
  return l;
}

struct ReferenceDistribution {
  std::vector<double> p;          // per token; 0 for dropped tokens
  size_t kept = 0;
  double min_p_margin = INFINITY; // min |ln(p_i/p_max) - ln(min_p)| over the top-k set
  double top_p_margin = INFINITY; // min |cumulative mass - top_p| over the top-p walk
};

inline ReferenceDistribution reference_distribution(const std::vector<float>& logits, double temperature,
                                                    int top_k, double top_p, double min_p) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(static_cast<size_t>(top_k));

  const double lmax = logits[order[0]];
  std::vector<double> prob(order.size());
  double z = 0.0;
  for (size_t j = 0; j < order.size(); ++j) {
    prob[j] = std::exp((static_cast<double>(logits[order[j]]) - lmax) / temperature);
    z += prob[j];
  }
  for (double& x : prob) x /= z;

  ReferenceDistribution r;
  r.p.assign(logits.size(), 0.0);
  double cumulative = 0.0;
  std::vector<size_t> keep;
  for (size_t j = 0; j < order.size(); ++j) {
    if (min_p > 0) {
      const double gap = std::log(prob[j] / prob[0]) - std::log(min_p);
      r.min_p_margin = std::min(r.min_p_margin, std::fabs(gap));
      if (prob[j] < min_p * prob[0]) break;
    }
    keep.push_back(j);
    cumulative += prob[j];
    if (top_p < 1.0) {
      r.top_p_margin = std::min(r.top_p_margin, std::fabs(cumulative - top_p));
      if (cumulative >= top_p) break;
    }
  }
  double kept_mass = 0.0;
  for (size_t j : keep) kept_mass += prob[j];
  for (size_t j : keep) r.p[static_cast<size_t>(order[j])] = prob[j] / kept_mass;
  r.kept = keep.size();
  return r;
}

inline std::vector<double> reference_log_softmax(const std::vector<float>& logits) {
  double lmax = -INFINITY;
  for (float l : logits)
    if (std::isfinite(l)) lmax = std::max(lmax, static_cast<double>(l));
  double z = 0.0;
  for (float l : logits)
    if (std::isfinite(l)) z += std::exp(static_cast<double>(l) - lmax);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = std::isfinite(logits[i]) ? static_cast<double>(logits[i]) - lmax - std::log(z) : -INFINITY;
  return out;
}

// Upper critical value of chi-square with `df` degrees of freedom at tail probability 1e-6
// (Wilson-Hilferty cube approximation, z = 4.753; accurate to a few percent for df >= 1, and
// we only need a bound that a correct sampler exceeds with probability ~1e-6).
inline double chi_square_critical_1e6(double df) {
  const double z = 4.753;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct FitResult {
  double chi_square = 0.0;
  double critical = 0.0;
  double total_variation = 0.0;
  double tv_bound = 0.0;
  int64_t draws_outside_support = 0;
  int64_t first_outside = -1;
};

// Pearson chi-square over tokens with expected count >= 5 (the rest pooled into one bin), and
// the total variation distance between the empirical and the reference distribution.
// TV bound: E[TV] <= 0.5 * sum_i sqrt(p_i / n) <= 0.5 * sqrt(K / n) (Jensen + Cauchy-Schwarz,
// K = support size) and TV moves by at most 1/n per draw, so by McDiarmid
// P(TV > E[TV] + t) <= exp(-2 n t^2); t = sqrt(ln(1e6) / (2n)) makes that 1e-6.
inline FitResult goodness_of_fit(const std::vector<double>& p, const std::vector<int64_t>& counts, int64_t n) {
  FitResult f;
  double pooled_expected = 0.0, pooled_observed = 0.0;
  int bins = 0;
  size_t support = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double expected = p[i] * static_cast<double>(n);
    const double observed = static_cast<double>(counts[i]);
    f.total_variation += 0.5 * std::fabs(observed / static_cast<double>(n) - p[i]);
    if (p[i] == 0.0) {
      if (counts[i] != 0) {
        f.draws_outside_support += counts[i];
        if (f.first_outside < 0) f.first_outside = static_cast<int64_t>(i);
      }
      continue;
    }
    ++support;
    if (expected >= 5.0) {
      f.chi_square += (observed - expected) * (observed - expected) / expected;
      ++bins;
    } else {
      pooled_expected += expected;
      pooled_observed += observed;
    }
  }
  if (pooled_expected >= 5.0) {
    f.chi_square += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  f.critical = bins > 1 ? chi_square_critical_1e6(bins - 1) : 0.0;
  const double dn = static_cast<double>(n);
  f.tv_bound = 0.5 * std::sqrt(static_cast<double>(support) / dn) + std::sqrt(std::log(1e6) / (2.0 * dn));
  return f;
}

}  // namespace ds4::test
