// CUDA backend parity, run on the GPU machine by scripts/device/cuda_suite.sh (skipped when no
// CUDA device is visible). Environment:
//   DS4_CUDA_WORK  folder with the converted fixtures (<name>.f32.gguf, flash_geom.q2.gguf)
//   DS4_FIXTURES   tests/fixtures (reference logits and token lists)
//   DS4_DEMO       models/ds4-demo.gguf (optional)
// Tolerances:
//  * f32 fixtures with the roundings off vs transformers' logits: 1e-3 at every position, prefill
//    and token by token (the CPU contract; the CPU measures ~1e-5). The GPU sums in another
//    order, which moves logits by ~1e-6 relative, far inside it.
//  * the same quantized file, roundings on, CUDA vs CPU: 1e-2 over all positions. Both quantize
//    the activations to the same Q8_0/Q8_K bytes except where a value sits within an ulp of a
//    rounding boundary (different float summation order upstream); an FP8/FP4 step that flips
//    there moves the logits by ~1e-3. A greedy continuation must be identical.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/backends.h"
#include "compute/cuda/cuda_backend.h"
#include "core/thread_pool.h"
#include "ds4/engine.h"
#include "ds4/session.h"
#include "model/deepseek4/model.h"
#include "quantize/quantize.h"
#include "session/steering.h"

namespace fs = std::filesystem;
using namespace ds4;
using model::deepseek4::Model;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "";
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

std::vector<int32_t> fixture_tokens(const std::string& name) {
  auto j = nlohmann::json::parse(std::ifstream(fs::path(env("DS4_FIXTURES")) / "deepseek4" / name / "tokens.json"));
  return j["tokens"].get<std::vector<int32_t>>();
}

struct Diff {
  double max_abs = 0;
  int64_t worst = -1;
  int64_t argmax_differ = 0;
};

Diff compare(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  Diff d;
  const int64_t n = static_cast<int64_t>(b.size()) / V;
  for (int64_t t = 0; t < n; ++t) {
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double x = std::fabs(static_cast<double>(a[t * V + i]) - b[t * V + i]);
      if (!(x <= d.max_abs)) d.max_abs = std::isnan(x) ? INFINITY : x, d.worst = t;
      if (a[t * V + i] > a[t * V + ia]) ia = i;
      if (b[t * V + i] > b[t * V + ib]) ib = i;
    }
    d.argmax_differ += ia != ib;
  }
  return d;
}

std::unique_ptr<compute::Backend> backend(const std::string& name, ThreadPool* pool, bool float_acts = false) {
  compute::BackendOptions o;
  o.name = name;
  o.pool = pool;
  o.float_activations = float_acts;
  o.verbose = false;
  return compute::make_backend(o);
}

// All positions' logits: one prefill (step 0), token by token (step 1), or evals of `step`
// tokens each (chunks whose boundaries fall inside compressor windows and, with a step below
// the sliding window, inside it too: the chunk ops' state hand-over from one chunk to the next).
std::vector<float> run(const Model& m, compute::Backend& be, const std::vector<int32_t>& toks, size_t step) {
  const size_t V = static_cast<size_t>(m.hparams().n_vocab);
  std::vector<float> out(toks.size() * V);
  auto st = m.new_state(be, static_cast<int64_t>(toks.size()) + 64);
  if (step == 0) step = toks.size();
  for (size_t i = 0; i < toks.size(); i += step) {
    const size_t n = std::min(step, toks.size() - i);
    m.eval(be, st, std::span(toks).subspan(i, n), out.data() + i * V);
  }
  return out;
}
std::vector<float> run(const Model& m, compute::Backend& be, const std::vector<int32_t>& toks, bool incremental) {
  return run(m, be, toks, static_cast<size_t>(incremental ? 1 : 0));
}

const char* step_label(size_t step) {
  static thread_local char buf[32];
  if (step == 0) return "prefill";
  if (step == 1) return "incremental";
  std::snprintf(buf, sizeof buf, "chunks of %zu", step);
  return buf;
}

std::vector<int32_t> greedy(const Model& m, compute::Backend& be, const std::vector<int32_t>& prompt, int n) {
  auto st = m.new_state(be, static_cast<int64_t>(prompt.size()) + n + 1);
  m.eval(be, st, prompt, nullptr);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto& l = st.logits;
    const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    m.eval(be, st, std::span(&out.back(), 1), nullptr);
  }
  return out;
}

class CudaParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    if (env("DS4_CUDA_WORK").empty() || env("DS4_FIXTURES").empty()) GTEST_SKIP() << "DS4_CUDA_WORK/DS4_FIXTURES unset";
  }
};

TEST_P(CudaParity, F32FixtureMatchesTransformers) {
  const std::string name = GetParam();
  model::deepseek4::Options o;
  o.act_quant_sim = false;
  auto m = Model::load((fs::path(env("DS4_CUDA_WORK")) / (name + ".f32.gguf")).string(), o);
  auto be = backend("cuda", nullptr);
  m->register_weights(*be);
  const auto toks = fixture_tokens(name);
  const auto want = read_f32(fs::path(env("DS4_FIXTURES")) / "deepseek4" / name / "logits.f32");
  const int64_t V = m->hparams().n_vocab;
  for (size_t step : {size_t{0}, size_t{1}, size_t{5}, size_t{37}}) {
    const auto got = run(*m, *be, toks, step);
    ASSERT_EQ(got.size(), want.size());
    Diff d = compare(got, want, V);
    std::printf("[cuda-parity] %-12s %-11s vs transformers: max|dlogit| %.3g (worst position %lld), argmax differs at %lld\n",
                name.c_str(), step_label(step), d.max_abs, static_cast<long long>(d.worst),
                static_cast<long long>(d.argmax_differ));
    EXPECT_LE(d.max_abs, 1e-3);
    EXPECT_EQ(d.argmax_differ, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity, ::testing::Values("swa_tiny", "mixed_small", "flash_geom"));

TEST(CudaQuant, FlashQ2FileFloatActsMatchesTransformersOnDecodedWeights) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fs::path(env("DS4_FIXTURES")) / "deepseek4" / "quant_small";
  model::deepseek4::Options o;
  o.act_quant_sim = false;
  auto m = Model::load((dir / "model-flash-q2.gguf").string(), o);
  auto be = backend("cuda", nullptr, /*float_acts=*/true);
  m->register_weights(*be);
  const auto want = read_f32(dir / "logits.f32");
  for (bool inc : {false, true}) {
    const auto got = run(*m, *be, fixture_tokens("quant_small"), inc);
    Diff d = compare(got, want, m->hparams().n_vocab);
    std::printf("[cuda-parity] quant_small  %-11s f32 acts vs transformers: max|dlogit| %.3g\n",
                inc ? "incremental" : "prefill", d.max_abs);
    EXPECT_LE(d.max_abs, 1e-3);
  }
}

// CUDA vs CPU on one quantized file with the default roundings on: all positions' logits
// (prefill and token by token) and a greedy continuation.
double mean_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(static_cast<double>(a[i]) - b[i]);
  return a.empty() ? 0 : s / static_cast<double>(a.size());
}

void expect_matches_cpu(const std::string& gguf, const std::vector<int32_t>& toks, const char* label) {
  // Roundings off first: what float summation order alone costs. Then on (the default): a value
  // within an ulp of an FP8/FP4 rounding boundary can round to the neighbouring code on one
  // backend, a step of 1/16 (FP8) or more (FP4) of that value.
  for (bool sim : {false, true}) {
    model::deepseek4::Options o;
    o.act_quant_sim = sim;
    auto m = Model::load(gguf, o);
    ThreadPool pool(0);
    auto cpu = backend("cpu", &pool);
    auto gpu = backend("cuda", nullptr);
    m->register_weights(*gpu);
    const auto ref = run(*m, *cpu, toks, false);
    const int64_t V = m->hparams().n_vocab;
    for (size_t step : {size_t{0}, size_t{1}, size_t{45}, size_t{100}}) {
      const auto got = run(*m, *gpu, toks, step);
      Diff d = compare(got, ref, V);
      std::printf("[cuda-parity] %s %-11s roundings %-3s CUDA vs CPU over %zu positions: max|dlogit| %.3g, mean %.3g, "
                  "argmax differs at %lld\n",
                  label, step_label(step), sim ? "on," : "off,", toks.size(), d.max_abs, mean_abs(got, ref),
                  static_cast<long long>(d.argmax_differ));
      EXPECT_LE(d.max_abs, 1e-2);
    }
    if (!sim) continue;
    const std::vector<int32_t> prompt(toks.begin(), toks.begin() + std::min<size_t>(64, toks.size()));
    const auto g_cpu = greedy(*m, *cpu, prompt, 64), g_gpu = greedy(*m, *gpu, prompt, 64);
    int same = 0;
    while (same < 64 && g_cpu[same] == g_gpu[same]) ++same;
    std::printf("[cuda-parity] %s greedy 64 tokens (roundings on): first %d identical\n", label, same);
    EXPECT_EQ(g_cpu, g_gpu);
  }
}

TEST(CudaQuant, QuantSmallWithRoundingsMatchesCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_matches_cpu((fs::path(env("DS4_FIXTURES")) / "deepseek4" / "quant_small" / "model-flash-q2.gguf").string(),
                     fixture_tokens("quant_small"), "quant_small q2");
}

// A synthetic file at the full Flash width (ds4-gguf synth --preset flash-q2 --layers 3: IQ2_XXS /
// Q2_K experts, Q8_0 attention, hash-routed and compressed layers), 512 random tokens.
TEST(CudaQuant, FlashWidthQ2WithRoundingsMatchesCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path f = fs::path(env("DS4_CUDA_WORK")) / "flash3.q2.gguf";
  if (!fs::exists(f)) GTEST_SKIP() << f << " not generated";
  std::vector<int32_t> toks(512);
  uint64_t x = 12345;
  for (auto& t : toks) t = static_cast<int32_t>((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 129280;
  expect_matches_cpu(f.string(), toks, "flash-width q2 (3 layers)");
}

// The demo model (real weights, Q8_0): greedy text on both backends, and how far apart their
// logits are along the CPU's own continuation (teacher-forced), so a divergence can be told
// apart from a near tie.
TEST(CudaDemo, GreedyTextIdentical) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string demo = env("DS4_DEMO");
  if (demo.empty() || !fs::exists(demo)) GTEST_SKIP() << "DS4_DEMO unset";
  auto e = Engine::open([&] {
    EngineOptions eo;
    eo.model_path = demo;
    return eo;
  }());
  auto prompt = e->tokenizer().encode("In the beginning God created", false);
  if (e->info().bos_id) prompt.insert(prompt.begin(), *e->info().bos_id);
  auto m = Model::load(demo);
  ThreadPool pool(0);
  auto cpu = backend("cpu", &pool);
  auto gpu = backend("cuda", nullptr);
  m->register_weights(*gpu);
  const auto g_cpu = greedy(*m, *cpu, prompt, 64), g_gpu = greedy(*m, *gpu, prompt, 64);
  int same = 0;
  while (same < 64 && g_cpu[same] == g_gpu[same]) ++same;
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), g_cpu.begin(), g_cpu.end());
  const auto lc = run(*m, *cpu, seq, false), lg = run(*m, *gpu, seq, false);
  const int64_t V = m->hparams().n_vocab;
  Diff d = compare(lg, lc, V);
  std::string at;
  if (same < 64) {
    // CPU's top-2 gap where the continuations part.
    const float* row = lc.data() + (prompt.size() - 1 + same) * V;
    std::vector<float> r(row, row + V);
    std::partial_sort(r.begin(), r.begin() + 2, r.end(), std::greater<float>());
    at = fmt::format(" (at token {} the CPU's top-2 logit gap is {:.3g})", same, r[0] - r[1]);
  }
  std::printf("[cuda-parity] demo q8_0 greedy 64 tokens: first %d identical%s; teacher-forced CUDA vs CPU max|dlogit| "
              "%.3g, mean %.3g over %zu positions, argmax differs at %lld\n",
              same, at.c_str(), d.max_abs, mean_abs(lg, lc), seq.size(), static_cast<long long>(d.argmax_differ));
  EXPECT_LE(d.max_abs, 1e-2);
  EXPECT_EQ(g_cpu, g_gpu);
}

// Decode steps through the replayed CUDA graphs: a step whose logits go to the state only
// (eval without logits_all, as Session::generate and greedy() here) is recorded on its key's
// second sighting and replayed; the incremental cases above pass logits_all and run op by op.
// 300 tokens one by one on the demo model (emission phases of both ratios, the indexer's
// top-k once active) equal the CPU's logits bit for bit, and the counters show the replays.
// (Added after the session's last GPU run: not yet run on a GPU.)
TEST(CudaDemo, ReplayedStepGraphsMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string demo = env("DS4_DEMO");
  if (demo.empty() || !fs::exists(demo)) GTEST_SKIP() << "DS4_DEMO unset";
  auto m = Model::load(demo);
  const size_t V = static_cast<size_t>(m->hparams().n_vocab);
  std::vector<int32_t> toks;
  for (int i = 0; i < 300; ++i) toks.push_back((i * 53 + 7) % static_cast<int32_t>(V));
  auto one_by_one = [&](compute::Backend& be) {
    auto st = m->new_state(be, static_cast<int64_t>(toks.size()));
    std::vector<float> out;
    for (size_t i = 0; i < toks.size(); ++i) {
      m->eval(be, st, std::span(toks).subspan(i, 1), nullptr);
      out.insert(out.end(), st.logits.begin(), st.logits.end());
    }
    return out;
  };
  ThreadPool pool(0);
  auto cpu = backend("cpu", &pool);
  auto gpu = backend("cuda", nullptr);
  m->register_weights(*gpu);
  const auto want = one_by_one(*cpu), got = one_by_one(*gpu);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  const std::string stats = compute::cuda_step_stats(*gpu);
  std::printf("[cuda-parity] demo 300 tokens one by one: %s\n", stats.c_str());
  long recorded = -1, replays = -1;
  std::sscanf(stats.c_str(), "step graphs: %ld recorded, %ld replays", &recorded, &replays);
  EXPECT_GT(recorded, 0) << stats;
  EXPECT_GT(replays, 200) << stats;
}

// The demo model re-quantized by our own quantizer (ds4-gguf quantize's library) under recipes
// that use the further weight formats (gemv_formats_ext.cuh) for the dense matrices, the token
// embedding and the routed experts; CUDA vs CPU as above (logits within 1e-2, the same greedy
// text). The demo's expert down projections are 128 wide, so they take the 32-weight formats.
// IQ2_XS and IQ1_S (whose writers need importance weights) get a random positive imatrix for
// the expert gate/up tensors.
// (Written and compiled on a machine without a GPU: first run is the lead's.)
TEST(CudaDemo, FurtherFormatsMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string demo = env("DS4_DEMO");
  if (demo.empty() || !fs::exists(demo)) GTEST_SKIP() << "DS4_DEMO unset";
  struct Mix {
    const char* name;
    const char *dense, *embd, *gate_up, *down;
    const char* extra = "";  // further rules, after the others
  };
  const Mix mixes[] = {
      {"q6_K dense, mxfp4 experts", "q6_K", "q6_K", "mxfp4", "mxfp4"},
      {"q4_0 dense, iq4_xs/q5_0 experts", "q4_0", "iq4_xs", "iq4_xs", "q5_0"},
      {"iq4_nl dense, q3_K/iq4_nl experts", "iq4_nl", "q5_K", "q3_K", "iq4_nl"},
      {"q5_K dense, iq3_xxs/q4_0 experts", "q5_K", "iq3_s", "iq3_xxs", "q4_0"},
      {"q3_K dense, iq1_m/mxfp4 experts", "q3_K", "iq2_s", "iq1_m", "mxfp4"},
      {"iq3_s dense, q6_K/q5_0 experts", "iq3_s", "q4_0", "q6_K", "q5_0"},
      {"iq2_s dense, q5_K/iq4_nl experts", "iq2_s", "iq3_xxs", "q5_K", "iq4_nl"},
      {"q5_1 dense, iq2_xs (layers 0-2) / iq1_s (3-5) gate/up, q4_0 down", "q5_1", "q5_1", "iq2_xs", "q4_0",
       "blk.*.ffn_gate_exps.weight iq1_s layers=3-5\nblk.*.ffn_up_exps.weight iq1_s layers=3-5\n"},
  };
  // Random positive importance weights for every routed gate/up tensor (per expert, as a
  // llama.cpp imatrix holds them).
  quantize::Imatrix imat;
  {
    auto m = Model::load(demo);
    const auto& hp = m->hparams();
    uint64_t z = 99;
    for (int64_t l = 0; l < hp.n_layer; ++l)
      for (const char* w : {"ffn_gate_exps", "ffn_up_exps"}) {
        quantize::ImatrixEntry e;
        e.ne0 = hp.n_embd;
        for (int64_t i = 0; i < hp.n_embd * hp.n_expert; ++i)
          e.sums.push_back(0.25 + static_cast<double>((z = z * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0);
        e.counts.assign(static_cast<size_t>(hp.n_expert), 1.0);
        imat.entries[fmt::format("blk.{}.{}.weight", l, w)] = std::move(e);
      }
  }
  const fs::path dir = fs::path(env("DS4_CUDA_WORK").empty() ? fs::temp_directory_path().string() : env("DS4_CUDA_WORK"));
  std::vector<int32_t> toks;
  for (int i = 0; i < 96; ++i) toks.push_back((i * 131 + 17) % 4096);
  int k = 0;
  for (const Mix& mx : mixes) {
    const std::string text = fmt::format(
        "* {}\ntoken_embd.weight {}\n*hc_*fn.weight f16\nblk.*.ffn_gate_inp.weight f16\n"
        "blk.*.attn_compressor_* f16\nblk.*.indexer.* f16\nblk.*.indexer_compressor_* f16\n"
        "blk.*.ffn_gate_exps.weight {}\nblk.*.ffn_up_exps.weight {}\nblk.*.ffn_down_exps.weight {}\n",
        mx.dense, mx.embd, mx.gate_up, mx.gate_up, mx.down) + mx.extra;
    quantize::QuantizeOptions qo;
    qo.recipe = quantize::parse_recipe(text, mx.name);
    qo.imatrix = imat;
    qo.imatrix_path = "random positive weights (test)";
    const fs::path out = dir / fmt::format("demo-further-{}.gguf", k++);
    const auto rep = quantize::quantize_file(demo, out.string(), qo);
    std::printf("[cuda-parity] %s: %zu tensors quantized, %.1f MB\n", mx.name, rep.quantized, rep.out_bytes / 1e6);
    expect_matches_cpu(out.string(), toks, mx.name);
    fs::remove(out);
  }
}

TEST(CudaBackend, MissingWeightRegistrationIsAnError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto m = Model::load((fs::path(env("DS4_FIXTURES")) / "deepseek4" / "quant_small" / "model-flash-q2.gguf").string());
  auto be = backend("cuda", nullptr);
  auto st = m->new_state(*be, 8);
  const std::vector<int32_t> toks = {1, 2};
  EXPECT_THROW(m->eval(*be, st, toks, nullptr), ds4::Error);
}

}  // namespace

// Directional steering on CUDA (it uses only upload + add): the demo model with random unit
// directions on every layer gives the CPU's logits bit for bit, prefill and token by token;
// scale 0 equals no hook. (Appended by the steering work; written and compiled on a machine
// without a GPU: first run is the lead's.)
TEST(CudaDemo, SteeringMatchesCpuBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string demo = env("DS4_DEMO");
  if (demo.empty() || !fs::exists(demo)) GTEST_SKIP() << "DS4_DEMO unset";
  auto m = Model::load(demo);
  const auto& hp = m->hparams();
  steer::Directions d;
  d.model_id = "0000000000000000";
  d.model_layers = static_cast<uint32_t>(hp.n_layer);
  d.first = 0;
  d.count = static_cast<uint32_t>(hp.n_layer);
  d.dim = static_cast<uint32_t>(hp.n_embd);
  uint32_t x = 12345;
  for (auto* v : {&d.attn, &d.ffn}) {
    v->resize(static_cast<size_t>(d.count) * d.dim);
    for (auto& f : *v) f = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  }
  ThreadPool pool(0);
  auto cpu = backend("cpu", &pool);
  auto gpu = backend("cuda", nullptr);
  m->register_weights(*gpu);
  std::vector<int32_t> toks;
  for (int i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % static_cast<int32_t>(hp.n_vocab));
  auto logits = [&](compute::Backend& be, float a, float f, bool incremental) {
    steer::SteerHook hook(d, hp.n_hc, a, f);
    const size_t V = static_cast<size_t>(hp.n_vocab);
    std::vector<float> out(toks.size() * V);
    auto st = m->new_state(be, static_cast<int64_t>(toks.size()));
    if (incremental) {
      for (size_t i = 0; i < toks.size(); ++i) m->eval(be, st, std::span(toks).subspan(i, 1), out.data() + i * V, &hook);
    } else {
      m->eval(be, st, toks, out.data(), &hook);
    }
    return out;
  };
  for (bool inc : {false, true}) {
    const auto c = logits(*cpu, 0.5f, 0.25f, inc), g = logits(*gpu, 0.5f, 0.25f, inc);
    EXPECT_EQ(std::memcmp(c.data(), g.data(), c.size() * sizeof(float)), 0) << "incremental " << inc;
    EXPECT_NE(c, run(*m, *cpu, toks, inc));  // the steering did something
  }
  const auto z = logits(*gpu, 0, 0, false), plain = run(*m, *gpu, toks, false);
  EXPECT_EQ(std::memcmp(z.data(), plain.data(), z.size() * sizeof(float)), 0);
}
