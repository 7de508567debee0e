// ns per sampled token on a DeepSeek V4 sized row (129280 logits), one configuration per case.
// Run: build-<dir>/tests/unit/sampling/bench_sampling
#include "reference.h"

#include <ds4/sampling.h>

#include <benchmark/benchmark.h>

namespace {

constexpr size_t kVocab = 129280;

// LM-like row: a few dozen tokens near the top, a long flat tail (see make_logits).
const std::vector<float>& row() {
  static const std::vector<float> l = ds4::test::make_logits(kVocab, 2024, 12.0, 1500.0);
  return l;
}

void run(benchmark::State& state, ds4::SamplerConfig config) {
  ds4::Sampler sampler(config);
  const auto& l = row();
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(l));
  state.SetItemsProcessed(state.iterations());
}

void BM_Greedy(benchmark::State& s) { run(s, {0.0f}); }
void BM_Defaults_T1_MinP005(benchmark::State& s) { run(s, {}); }
void BM_TopK40_T08(benchmark::State& s) { run(s, {0.8f, 40, 1.0f, 0.0f}); }
void BM_TopK40_TopP095_MinP005(benchmark::State& s) { run(s, {0.8f, 40, 0.95f, 0.05f}); }
void BM_TopP09_MinP005(benchmark::State& s) { run(s, {1.0f, 0, 0.9f, 0.05f}); }
void BM_TopP09_NoMinP(benchmark::State& s) { run(s, {1.0f, 0, 0.9f, 0.0f}); }
void BM_Unfiltered(benchmark::State& s) { run(s, {1.0f, 0, 1.0f, 0.0f}); }

void BM_Logprobs_Top20(benchmark::State& state) {
  const auto& l = row();
  for (auto _ : state) benchmark::DoNotOptimize(ds4::compute_logprobs(l, 5, 20));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Greedy);
BENCHMARK(BM_Defaults_T1_MinP005);
BENCHMARK(BM_TopK40_T08);
BENCHMARK(BM_TopK40_TopP095_MinP005);
BENCHMARK(BM_TopP09_MinP005);
BENCHMARK(BM_TopP09_NoMinP);
BENCHMARK(BM_Unfiltered);
BENCHMARK(BM_Logprobs_Top20);

}  // namespace

BENCHMARK_MAIN();
