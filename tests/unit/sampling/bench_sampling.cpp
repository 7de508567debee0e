// ns per sampled token on DeepSeek V4 sized rows (129280 logits), one configuration per case.
// Run: <build>/tests/unit/sampling/bench_sampling
// Two synthetic rows (no model needed):
//   gauss:     a Gaussian bulk (sigma 3) with 16 head tokens 14..22 above the bulk mean; a smooth
//              tail and a dominant head, like a real LM row.
//   flat_tail: 129k tail tokens within 2 nats of each other plus a sharp head (make_logits);
//              a top-p worst case, because the nucleus boundary (p = 0.9) falls inside a cliff
//              of ~90k near-equal weights.
#include "reference.h"
#include "sampling/exp_weights.h"

#include <ds4/sampling.h>

#include <benchmark/benchmark.h>

#include <cmath>

namespace {

constexpr size_t kVocab = 129280;

const std::vector<float>& gauss_row() {
  static const std::vector<float> l = [] {
    ds4::test::TestUniform u(77);
    std::vector<float> r(kVocab);
    for (auto& x : r) {  // Box-Muller
      const double a = 1.0 - u.next(), b = u.next();
      x = static_cast<float>(3.0 * std::sqrt(-2.0 * std::log(a)) * std::cos(6.283185307179586 * b));
    }
    for (int i = 0; i < 16; ++i) r[static_cast<size_t>(u.next() * kVocab)] = static_cast<float>(14.0 + 8.0 * u.next());
    return r;
  }();
  return l;
}

const std::vector<float>& flat_tail_row() {
  static const std::vector<float> l = ds4::test::make_logits(kVocab, 2024, 12.0, 1500.0);
  return l;
}

void run(benchmark::State& state, const std::vector<float>& (*row)(), ds4::SamplerConfig config) {
  ds4::Sampler sampler(config);
  const auto& l = row();
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(l));
  state.SetItemsProcessed(state.iterations());
}

#define DS4_BENCH_CONFIG(name, ...)                                                            \
  void BM_##name(benchmark::State& s, const std::vector<float>& (*row)()) { run(s, row, __VA_ARGS__); } \
  BENCHMARK_CAPTURE(BM_##name, gauss, gauss_row);                                              \
  BENCHMARK_CAPTURE(BM_##name, flat_tail, flat_tail_row);

DS4_BENCH_CONFIG(Greedy, {0.0f})
DS4_BENCH_CONFIG(Ds4Defaults_T1_MinP005, {})
DS4_BENCH_CONFIG(TopK40_T08, {0.8f, 40, 1.0f, 0.0f})
DS4_BENCH_CONFIG(LlamaDefaults_K40_P095_MinP005_T08, {0.8f, 40, 0.95f, 0.05f})
DS4_BENCH_CONFIG(TopP09_MinP005, {1.0f, 0, 0.9f, 0.05f})
DS4_BENCH_CONFIG(TopP09_NoMinP, {1.0f, 0, 0.9f, 0.0f})
DS4_BENCH_CONFIG(Unfiltered_T1, {1.0f, 0, 1.0f, 0.0f})

void BM_Logprobs_Top20(benchmark::State& state) {
  const auto& l = gauss_row();
  for (auto _ : state) benchmark::DoNotOptimize(ds4::compute_logprobs(l, 5, 20));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Logprobs_Top20);

void BM_ExpWeightsRow(benchmark::State& state) {
  const auto& l = gauss_row();
  std::vector<float> w(l.size());
  for (auto _ : state) {
    ds4::sampling::exp_weights(l.data(), l.size(), 12.0f, 1.0f, w.data());
    benchmark::DoNotOptimize(w.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExpWeightsRow);

}  // namespace

BENCHMARK_MAIN();
