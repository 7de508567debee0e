#pragma once
// Token sampling and log-probabilities over one row of next-token logits.
//
// Semantics follow antirez/ds4 (ds4.c: sample_top_p_min_p, ds4_session_top_logprobs), which this
// project re-creates; differences are listed under "Deviations" below.
//
// Filter order (applied by Sampler::sample when temperature > 0):
//   1. top-k    keep the k highest logits; ties broken by lower token id. k <= 0 or k >= the
//               number of finite logits disables it.
//   2. softmax  with temperature T over the survivors of 1: w_i = exp((l_i - l_max) / T),
//               p_i = w_i / Z, Z = sum of w over the survivors of 1.
//   3. min-p    drop tokens with p_i < min_p * p_max (equivalently, l_i < l_max + T ln(min_p)).
//   4. top-p    walk the survivors of 3 in descending logit order (ties: lower id first) and keep
//               the shortest prefix whose mass, measured in p of step 2 (NOT renormalized after
//               min-p), reaches top_p. top_p >= 1 disables it.
//   5. draw     one uniform u in [0,1) from the RNG; pick the token whose interval of the
//               cumulative kept weights (walked in ascending token id) contains u * sum(kept w).
// Steps 3 and 4 each keep a prefix of the same ordering measured on the same distribution, so
// they commute; the result is the shorter prefix. The top token always survives.
// Temperature <= 0 is greedy: the argmax, ties broken by lower id; greedy consumes no random
// number. llama.cpp's default chain (top_k, top_p, min_p, ..., temperature) differs in one way:
// it applies temperature last, so its min-p / top-p see the T=1 distribution; ds4 and we apply
// temperature before min-p / top-p.
//
// Non-finite logits: NaN and -inf have probability 0 and are never chosen (also not by greedy).
// A +inf logit, or a row with no finite logit, throws ds4::Error: both mean the model output is
// garbage and there is no distribution to sample.
//
// Numerics: weights are float, exp((l_i - l_max) * (1/T)) with the library's own exp (relative
// error < 3e-7, no libm). A weight below 2^-126 (l_i < l_max - 87 T, under 1e-37 of the top
// token's probability) counts as 0 and is never drawn. Sums (Z, prefix masses, the draw) are
// taken in double.
//
// Determinism: the RNG is SplitMix64 (Steele, Lea, Flood 2014) with a documented uniform
// derivation, so the stream of uniforms is bit-identical on every platform; the weights and sums
// use fixed operation orders without FMA contraction, so they are bit-identical too. The chosen
// token is therefore identical for identical logits, config, seed and RNG position. The one libm
// call is log(min_p) in double, which could move the min-p cut by an ulp on another libm.
//
// Cost on a 129280-entry row (2-core AMD EPYC dev box, see docs/BENCHMARKS.md): greedy ~8 us,
// ds4 defaults ~17-20 us, top-k 40 ~28 us, top-p without min-p ~0.2 ms on an LM-like row. No path
// sorts the vocabulary: top-k selects against block maxima, min-p is a logit threshold, top-p
// narrows the nucleus with weight floors and a radix selection before sorting a few tokens.
//
// Deviations from ds4: top_p = 0 keeps only the top token (ds4 silently treats top_p <= 0 as 1;
// llama.cpp keeps one token); top_k is not capped at 1024; the RNG is SplitMix64 rather than
// ds4's xorshift64*, because its state is a (seed, draw count) pair that a session payload can
// save and rewind; out-of-range parameters throw instead of being clamped.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace ds4 {

// Defaults match ds4.h (DS4_DEFAULT_TEMPERATURE / TOP_P / MIN_P) and ds4's top_k = 0.
struct SamplerConfig {
  float temperature = 1.0f;  // <= 0: greedy. Must not be NaN or +inf.
  int32_t top_k = 0;         // <= 0: off.
  float top_p = 1.0f;        // in [0, 1]; 1: off; 0: only the top token.
  float min_p = 0.05f;       // in [0, 1]; 0: off; 1: only tokens tied with the top logit.
  uint64_t seed = 0;         // used as is; pick a random one yourself for non-reproducible runs.
};

// Throws ds4::Error naming the offending field when a value is NaN or out of range.
void validate(const SamplerConfig& config);

// Position of a SplitMix64 stream. The n-th output (n counted from 1) is
// mix(seed + n * 0x9E3779B97F4A7C15), so any position can be restored from these two numbers.
struct RngState {
  uint64_t seed = 0;
  uint64_t draws = 0;
};

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_{seed, 0} {}
  explicit Rng(RngState s) : state_(s) {}

  // SplitMix64 output function (Vigna's reference constants).
  uint64_t next_u64() {
    ++state_.draws;
    uint64_t z = state_.seed + state_.draws * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1): the top 53 bits of next_u64() times 2^-53 (exact in double).
  double next_unit() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  RngState state() const { return state_; }
  void set_state(RngState s) { state_ = s; }

 private:
  RngState state_;
};

// Per-call adjustments; the defaults leave the configured behaviour unchanged.
struct SampleOptions {
  // Replaces config.temperature for this call only (e.g. 0 to force greedy while the server
  // generates DSML tool-call tags). Same validity rules as the config field.
  std::optional<float> temperature;
  // Mask / bias hook: called once with a private copy of the logits before any filter; the
  // caller's logits are never modified. Set an entry to -inf to ban a token, add to bias it.
  // Writing NaN bans a token too; writing +inf makes sample() throw.
  std::function<void(std::span<float> logits)> adjust_logits;
};

namespace detail {
// Working record of the sampler; public only so the private members below can name it.
struct SampleCandidate {
  int32_t id;
  float logit;
  float weight;
};
}  // namespace detail

// One per generation stream: holds the RNG and reusable scratch, so not safe to share between
// threads without a lock.
class Sampler {
 public:
  // Validates the config (throws ds4::Error) and seeds the RNG with config.seed.
  explicit Sampler(const SamplerConfig& config = {});

  // Returns a token id in [0, logits.size()). logits.size() is the vocabulary size (129280 for
  // DeepSeek V4). Throws ds4::Error on an empty row, a +inf logit, no finite logit, or an invalid
  // temperature override. Consumes exactly one RNG draw unless the call is greedy.
  int32_t sample(std::span<const float> logits, const SampleOptions& options = {});

  const SamplerConfig& config() const { return config_; }
  // Changes filters for later calls; the RNG position is kept (config.seed is not re-applied).
  void set_config(const SamplerConfig& config);

  Rng& rng() { return rng_; }
  const Rng& rng() const { return rng_; }

 private:
  void collect_at_least(std::span<const float> row, float threshold, const float* weights, float weight_floor);
  int32_t draw_from_row(std::span<const float> row, float max_logit, float inv_t, int32_t fallback);

  SamplerConfig config_;
  Rng rng_;
  std::vector<float> adjusted_;                  // copy handed to adjust_logits
  std::vector<float> weights_;                   // whole-row softmax weights when needed
  std::vector<detail::SampleCandidate> kept_;    // candidate sets, reused across calls
  std::vector<detail::SampleCandidate> top_k_;
  std::vector<double> block_sums_;
};

// Index of the largest finite logit, lowest id on ties (NaN and -inf skipped). Throws ds4::Error
// on an empty row, a +inf logit, or no finite logit.
int32_t argmax(std::span<const float> logits);

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;  // natural log; -inf for a token with a NaN or -inf logit
};

struct Logprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // best first: logprob descending, ties by lower id
};

// Log-softmax of the logits exactly as given: no temperature, no sampling filters, i.e. the
// model distribution, which is what the OpenAI API reports as logprobs (and what ds4 reports).
// NaN / -inf logits have probability 0; `top` lists only tokens of nonzero probability, so it
// has min(n_top, number of finite logits) entries. Sums are taken in double.
// Throws ds4::Error on an empty row, a +inf logit, no finite logit, chosen outside
// [0, logits.size()), or n_top < 0.
Logprobs compute_logprobs(std::span<const float> logits, int32_t chosen, int32_t n_top);

}  // namespace ds4
