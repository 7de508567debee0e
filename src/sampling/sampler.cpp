// Sampler::sample: the filter chain documented in include/ds4/sampling.h. The work is arranged so
// the common configurations touch the 129280-entry row only once or twice without exp():
// min-p is a threshold in logit space, so only its survivors get weights, and top-p sorts only
// as far as its prefix reaches.
#include "core/error.h"
#include "sampling/logit_row.h"

#include <ds4/sampling.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace ds4 {
namespace {

using sampling::Candidate;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_temperature(float t, const char* field) {
  if (std::isnan(t) || t == std::numeric_limits<float>::infinity())
    fail("sampler: {} = {} is not a usable temperature (need a finite value; <= 0 means greedy)",
         field, t);
}

void check_unit_interval(float v, const char* field) {
  if (!(v >= 0.0f && v <= 1.0f)) fail("sampler config: {} = {} is outside [0, 1]", field, v);
}

// Smallest float f such that l >= f exactly when l >= max + T*ln(min_p) in real arithmetic
// (evaluated in double), i.e. when exp((l - max)/T) >= min_p. -inf when min-p is off.
float min_p_threshold(float max_logit, float temperature, float min_p) {
  if (min_p <= 0.0f) return kNegInf;
  const double t = static_cast<double>(max_logit) +
                   static_cast<double>(temperature) * std::log(static_cast<double>(min_p));
  if (t <= -static_cast<double>(FLT_MAX)) return kNegInf;  // every finite logit passes
  float f = static_cast<float>(t);
  if (static_cast<double>(f) < t) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// Keeps the shortest prefix of `c` under sampling::better() whose weight sum reaches `target`
// (all of it when the sum never does). Sorts only as deep as needed, growing the sorted part
// geometrically, so a nucleus of a few dozen tokens costs O(n) rather than O(n log n).
void keep_nucleus(std::vector<Candidate>& c, double target) {
  const size_t n = c.size();
  double mass = 0.0;
  size_t sorted = 0;
  size_t chunk = 64;
  while (sorted < n) {
    const size_t end = std::min(n, sorted + chunk);
    std::partial_sort(c.begin() + static_cast<ptrdiff_t>(sorted), c.begin() + static_cast<ptrdiff_t>(end),
                      c.end(), sampling::better);
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

}  // namespace

void validate(const SamplerConfig& config) {
  check_temperature(config.temperature, "temperature");
  check_unit_interval(config.top_p, "top_p");
  check_unit_interval(config.min_p, "min_p");
}

Sampler::Sampler(const SamplerConfig& config) : rng_(config.seed) {
  validate(config);
  config_ = config;
}

void Sampler::set_config(const SamplerConfig& config) {
  validate(config);
  config_ = config;
}

int32_t argmax(std::span<const float> logits) { return sampling::scan_row(logits, "argmax").argmax; }

int32_t Sampler::sample(std::span<const float> logits, const SampleOptions& options) {
  std::span<const float> row = logits;
  if (options.adjust_logits) {
    adjusted_.assign(logits.begin(), logits.end());
    options.adjust_logits(std::span<float>(adjusted_));
    row = adjusted_;
  }
  float temperature = config_.temperature;
  if (options.temperature) {
    check_temperature(*options.temperature, "SampleOptions.temperature");
    temperature = *options.temperature;
  }
  const sampling::RowStats stats = sampling::scan_row(row, "Sampler::sample");
  if (temperature <= 0.0f) return stats.argmax;

  const float max_logit = stats.max;
  const float threshold = min_p_threshold(max_logit, temperature, config_.min_p);
  const bool top_k_on = config_.top_k > 0 && config_.top_k < stats.n_finite;
  const bool top_p_on = config_.top_p < 1.0f;
  auto weight_of = [&](float l) { return std::exp((l - max_logit) / temperature); };

  kept_.clear();
  bool id_ordered = true;  // kept_ already in ascending id order?
  if (!top_p_on) {
    // min-p and top-k both keep a prefix of the same order, so take the (usually tiny) min-p
    // set first and cut it to k only if it is larger.
    for (size_t i = 0; i < row.size(); ++i) {
      const float l = row[i];
      if (l >= threshold && l > kNegInf) kept_.push_back({static_cast<int32_t>(i), l, 0.0f});
    }
    const size_t k = static_cast<size_t>(config_.top_k);
    if (top_k_on && kept_.size() > k) {
      std::nth_element(kept_.begin(), kept_.begin() + static_cast<ptrdiff_t>(k), kept_.end(),
                       sampling::better);
      kept_.resize(k);
      id_ordered = false;
    }
    for (Candidate& c : kept_) c.weight = weight_of(c.logit);
  } else {
    // top-p measures mass against Z over the whole top-k set, so that set (or the whole row)
    // needs weights even where min-p later drops the token.
    double z = 0.0;
    if (top_k_on) {
      sampling::select_best(row, stats.n_finite, config_.top_k, top_k_);
      std::sort(top_k_.begin(), top_k_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
      for (Candidate& c : top_k_) {
        c.weight = weight_of(c.logit);
        z += c.weight;
        if (c.logit >= threshold) kept_.push_back(c);
      }
    } else {
      for (size_t i = 0; i < row.size(); ++i) {
        const float l = row[i];
        if (!(l > kNegInf)) continue;
        const float w = weight_of(l);
        z += w;
        if (l >= threshold) kept_.push_back({static_cast<int32_t>(i), l, w});
      }
    }
    keep_nucleus(kept_, static_cast<double>(config_.top_p) * z);
    id_ordered = false;
  }

  // Canonical walk order (ascending id) so the token drawn for a given uniform does not depend
  // on how a standard library orders nth_element / partial_sort output.
  if (!id_ordered)
    std::sort(kept_.begin(), kept_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double total = 0.0;
  for (const Candidate& c : kept_) total += c.weight;
  // total >= 1: the top token always survives and has weight exp(0) = 1.
  const double target = rng_.next_unit() * total;
  double mass = 0.0;
  for (const Candidate& c : kept_) {
    mass += c.weight;
    if (target < mass) return c.id;
  }
  // Unreachable: the walk repeats the additions that produced `total`, and target < total.
  return kept_.back().id;
}

}  // namespace ds4
