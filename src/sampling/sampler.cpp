// Sampler::sample: the filter chain documented in include/ds4/sampling.h, arranged so no path
// sorts the vocabulary. min-p is a threshold in logit space, so with top-p off only its
// survivors ever get an exp(); top-k selects against block maxima; top-p needs Z over the whole
// row (one vectorized exp pass) and then materializes only tokens above a weight floor.
#include "core/error.h"
#include "sampling/exp_weights.h"
#include "sampling/logit_row.h"
#include "sampling/nucleus.h"

#include <ds4/sampling.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

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

void Sampler::collect_at_least(std::span<const float> row, float threshold, const float* weights,
                               float weight_floor) {
  // Blocks without a qualifying logit are skipped after one vectorized count.
  constexpr size_t kBlock = 1024;
  for (size_t off = 0; off < row.size(); off += kBlock) {
    const size_t n = std::min(kBlock, row.size() - off);
    if (threshold > kNegInf && sampling::count_at_least(row.data() + off, n, threshold) == 0) continue;
    for (size_t i = off; i < off + n; ++i) {
      const float l = row[i];
      if (!(l >= threshold && l > kNegInf)) continue;
      if (weights) {
        // A zero-weight token can never be drawn, so it is never worth keeping.
        if (!(weights[i] > 0.0f && weights[i] >= weight_floor)) continue;
        kept_.push_back({static_cast<int32_t>(i), l, weights[i]});
      } else {
        kept_.push_back({static_cast<int32_t>(i), l, 0.0f});
      }
    }
  }
}

int32_t Sampler::draw_from_row(std::span<const float> row, float max_logit, float inv_t,
                               int32_t fallback) {
  // Whole-row weights walked in id order, block by block: block sums locate the block, a
  // sequential walk inside it finds the token.
  constexpr size_t kBlock = 4096;
  weights_.resize(row.size());
  sampling::exp_weights(row.data(), row.size(), max_logit, inv_t, weights_.data());
  block_sums_.clear();
  double total = 0.0;
  for (size_t off = 0; off < row.size(); off += kBlock) {
    block_sums_.push_back(sampling::sum_weights(weights_.data() + off, std::min(kBlock, row.size() - off)));
    total += block_sums_.back();
  }
  const double target = rng_.next_unit() * total;  // total >= 1: the top token has weight 1
  double mass = 0.0;
  size_t off = 0;
  for (size_t b = 0; b + 1 < block_sums_.size() && !(target < mass + block_sums_[b]); ++b, off += kBlock)
    mass += block_sums_[b];
  const size_t end = std::min(off + kBlock, row.size());
  int32_t last_live = -1;
  for (size_t i = off; i < end; ++i) {
    if (weights_[i] <= 0.0f) continue;
    mass += weights_[i];
    last_live = static_cast<int32_t>(i);
    if (target < mass) return last_live;
  }
  // Only reachable when target falls in the last ulps of the block, where the in-block walk's
  // rounding differs from the lane-ordered block sum; the block holds a live token because its
  // sum exceeded target - mass > 0.
  return last_live >= 0 ? last_live : fallback;
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
  const bool min_p_on = threshold > kNegInf;
  const float inv_t = 1.0f / temperature;  // +inf for a subnormal T; softmax_weight copes
  auto weigh = [&](Candidate& c) { c.weight = sampling::softmax_weight(c.logit, max_logit, inv_t); };

  kept_.clear();
  bool id_ordered = true;  // kept_ already in ascending id order?
  if (!top_k_on && !top_p_on && !min_p_on) return draw_from_row(row, max_logit, inv_t, stats.argmax);

  if (!top_p_on) {
    if (top_k_on && !min_p_on) {
      sampling::select_best(row, stats.n_finite, config_.top_k, kept_);
      id_ordered = false;
    } else {
      // min-p and top-k both keep a prefix of the same order, so take the (usually tiny) min-p
      // set first and cut it to k only if it is larger.
      collect_at_least(row, threshold, nullptr, 0.0f);
      const size_t k = static_cast<size_t>(config_.top_k);
      if (top_k_on && kept_.size() > k) {
        std::nth_element(kept_.begin(), kept_.begin() + static_cast<ptrdiff_t>(k), kept_.end(),
                         sampling::better);
        kept_.resize(k);
        id_ordered = false;
      }
    }
    for (Candidate& c : kept_) weigh(c);
  } else {
    // top-p measures mass against Z over the whole top-k set (or the whole row), so all of
    // those need weights even where min-p later drops the token.
    double z = 0.0;
    if (top_k_on) {
      sampling::select_best(row, stats.n_finite, config_.top_k, top_k_);
      std::sort(top_k_.begin(), top_k_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
      for (Candidate& c : top_k_) {
        weigh(c);
        z += c.weight;
        if (c.logit >= threshold) kept_.push_back(c);
      }
    } else {
      weights_.resize(row.size());
      sampling::exp_weights(row.data(), row.size(), max_logit, inv_t, weights_.data());
      z = sampling::sum_weights(weights_.data(), weights_.size());
      // Materialize only tokens that can be in the nucleus: lower a weight floor 4x at a time
      // until the mass above it covers the target (one vectorized pass per probe; a peaked
      // row needs one or two). keep_nucleus then finds the exact prefix among them.
      const double target = static_cast<double>(config_.top_p) * z;
      float floor = 0x1.0p-2f;
      while (floor > 0.0f && sampling::mass_at_least(weights_.data(), weights_.size(), floor) < target + 1e-9 * z)
        floor = floor > 0x1.0p-120f ? floor * 0x1.0p-2f : 0.0f;
      collect_at_least(row, threshold, weights_.data(), floor);
    }
    sampling::keep_nucleus(kept_, static_cast<double>(config_.top_p) * z);
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
