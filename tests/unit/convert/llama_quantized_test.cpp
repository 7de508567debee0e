// GGUFs made by llama.cpp's own quantizer load and run (issue 22): the flash_geom fixture is
// converted by convert-hf to f32, requantized by llama.cpp v0.5.0's llama_model_quantize into
// each DeepSeek-relevant file type, and each file is run by llama.cpp (f32 KV cache, flash
// attention off: its float-only path) and by our engine on the same tokens. llama.cpp's CPU
// backend cannot run attn_output_a in any type but F32 (llama_cpu_compat.h), so both engines
// run a copy with those tensors decoded to F32; every other tensor keeps llama-quantize's type. Both engines
// quantize activations to ggml's Q8_0/Q8_1/Q8_K formats before every quantized matmul, but not
// bit-identically (ggml's CPU activation quantizers are SIMD versions whose rounding of ties
// differs from the reference rules we use) and they sum in different orders, so the logits
// differ by more than in the f32 cross-check; the tolerance below is stated from measurements.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "convert/convert_hf.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "llama_cpu_compat.h"
#include "llama_quantize.h"
#include "llama_runner.h"
#include "model/deepseek4/model.h"

namespace fs = std::filesystem;

namespace {

constexpr size_t kVocab = 256;
constexpr size_t kTokens = 160;  // past position ~67, where the CSA indexer starts choosing
// Before this position every CSA layer attends to all of its compressed rows (fewer than
// top_k = 16), so logits are smooth functions of the weights; later, the indexer's top-16
// choice among near-tied random rows can flip with any rounding difference and move a logit
// by O(1) on this random-weight fixture (LLAMA_CPP_CROSSCHECK.md). Differences are bounded on
// the smooth prefix; the whole run is checked by top-1 agreement.
constexpr size_t kSmooth = 64;
// Measured (docs/LLAMA_CPP_CROSSCHECK.md, 2026-12-01): both engines on the f32 decode agree to
// <= 5.5e-6 (bound 1e-4, as llama_crosscheck_test). Ours on the quantized file vs the f32
// reference: mean |diff| 0.018-0.024 over all logits, top-1 >= 150/160; llama.cpp's own
// quantized CPU path, where it works, is at the same distance (0.019-0.022), because both
// quantize activations to Q8_0/Q8_1/Q8_K and the random fixture's MoE routing and indexer
// choices flip on near ties (max |diff| up to ~1.8). Bounds: mean 0.06, top-1 >= 90%.
// Ours vs llama.cpp on the same quantized file: mean <= 0.0094, max <= 0.093 where llama.cpp's
// quantized path is healthy (bounds 0.03 and 0.3).
constexpr double kF32Tol = 1e-4;
constexpr double kMeanTol = 0.06;
constexpr double kDirectMeanTol = 0.03, kDirectMaxTol = 0.3;

std::string fixture(const std::string& f) { return std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom/" + f; }

class LlamaQuantized : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ds4_llama_quant_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    f32_ = (dir_ / "f32.gguf").string();
    ds4::convert::ConvertOptions o{std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom", f32_, ds4::convert::Recipe::F32, 0, {}};
    ds4::convert::convert_hf(o);
    tokens_ = nlohmann::json::parse(std::ifstream(fixture("tokens.json")))["tokens"].get<std::vector<int32_t>>();
    tokens_.resize(kTokens);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  struct Diff {
    bool nan = false;
    double smooth = 0;  // max |a - b| over positions < kSmooth
    double all = 0;     // over every position
    double mean = 0;    // mean |a - b| over every logit
    size_t top1 = 0;    // positions whose argmax agrees
  };
  static Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
    Diff r;
    for (size_t p = 0; p < tokens_.size(); ++p) {
      size_t ia = 0, ib = 0;
      for (size_t v = 0; v < kVocab; ++v) {
        const size_t k = p * kVocab + v;
        const double d = std::fabs(static_cast<double>(a[k]) - b[k]);
        if (std::isnan(d)) r.nan = true;
        if (p < kSmooth) r.smooth = std::max(r.smooth, d);
        r.all = std::max(r.all, d);
        r.mean += d / static_cast<double>(a.size());
        if (a[k] > a[p * kVocab + ia]) ia = v;
        if (b[k] > b[p * kVocab + ib]) ib = v;
      }
      r.top1 += ia == ib;
    }
    if (r.nan) r.smooth = r.all = r.mean = INFINITY;
    return r;
  }

  struct Result {
    std::set<std::string> types;
    Diff ours_vs_decoded;    // ours on the quantized file vs llama.cpp on its exact f32 decode
    Diff decoded;            // both engines on the f32 decode
    Diff direct;             // both engines on the quantized file (attn_output_a f32)
    Diff llama_q_vs_decoded; // llama.cpp on the quantized file vs on its f32 decode
  };

  static std::vector<float> llama(const std::string& path) {
    ds4::test::LlamaOptions opt;
    opt.kv = ds4::test::LlamaOptions::Kv::F32;
    opt.flash_attn = 0;
    ds4::test::LlamaRunner runner;
    int32_t n_vocab = 0;
    auto l = runner.logits(path, tokens_, /*incremental=*/false, &n_vocab, opt);
    EXPECT_EQ(n_vocab, static_cast<int32_t>(kVocab));
    return l;
  }

  static std::vector<float> ours(const std::string& path) {
    ds4::model::deepseek4::Options mo;
    mo.act_quant_sim = false;
    auto m = ds4::model::deepseek4::Model::load(path, mo);
    ds4::ThreadPool pool(2);
    auto be = ds4::compute::make_cpu_backend(&pool);
    std::vector<float> o(tokens_.size() * kVocab);
    auto st = m->new_state(*be, static_cast<int64_t>(tokens_.size()));
    m->eval(*be, st, tokens_, o.data());
    return o;
  }

  static Result run(ds4::test::LlamaFtype ft, const char* name) {
    const std::string q = (dir_ / (std::string(name) + ".gguf")).string();
    const std::string dec = (dir_ / (std::string(name) + "-f32.gguf")).string();
    const std::string cpu = (dir_ / (std::string(name) + "-cpu.gguf")).string();
    ds4::test::llama_quantize(f32_, q, ft);
    Result r;
    {
      const auto f = ds4::gguf::File::open(q);
      for (const auto& t : f.tensors()) r.types.insert(std::string(ds4::traits(t.type).name));
    }
    ds4::test::with_f32_tensors(q, dec, "");
    ds4::test::with_f32_attn_output_a(q, cpu);
    const auto o = ours(q), o_dec = ours(dec), l_dec = llama(dec);
    r.ours_vs_decoded = diff(o, l_dec);
    r.decoded = diff(o_dec, l_dec);
    const auto l_cpu = llama(cpu);
    r.direct = diff(ours(cpu), l_cpu);
    r.llama_q_vs_decoded = diff(l_cpu, l_dec);
    std::string ts;
    for (const auto& t : r.types) ts += " " + t;
    auto show = [](const Diff& d) {
      return d.nan ? std::string("NaN in llama.cpp") : fmt::format("mean {:.3g} max {:.3g} top1 {}", d.mean, d.all, d.top1);
    };
    std::printf("%-9s%-30s ours(q) vs f32 ref: %s | f32 both: %s | ours(q) vs llama(q): %s | llama(q) vs f32 ref: %s\n", name,
                ts.c_str(), show(r.ours_vs_decoded).c_str(), show(r.decoded).c_str(), show(r.direct).c_str(),
                show(r.llama_q_vs_decoded).c_str());
    ::testing::Test::RecordProperty(std::string(name) + " max_abs_diff_smooth", std::to_string(r.ours_vs_decoded.smooth));
    fs::remove(q);
    fs::remove(dec);
    fs::remove(cpu);
    return r;
  }

  static inline fs::path dir_;
  static inline std::string f32_;
  static inline std::vector<int32_t> tokens_;
};

struct Case {
  ds4::test::LlamaFtype ft;
  const char* name;
  std::vector<const char*> must_contain;  // ggml types llama-quantize uses for this fixture (measured)
  // Largest |dlogit| allowed between the two engines' quantized paths where llama.cpp's is healthy.
  // Q4_0 and MXFP4_MOE: 0.94 and 0.90 measured (2026-12-02) on an AVX2-only AMD EPYC, where
  // llama.cpp v0.5.0 computes these files (on the AVX-512 VM this test was written on it gave
  // NaN, so they were skipped); their mean agreement, 0.011 and 0.009, is the other types'.
  // At the worst position each engine is itself 0.79 (Q4_0) / 0.92 (ours, MXFP4) from the float
  // decode, so the two can differ that much there.
  double direct_max = kDirectMaxTol;
};

const Case kCases[] = {
    {ds4::test::LlamaFtype::Q4_0, "Q4_0", {"q4_0"}, 1.0},
    {ds4::test::LlamaFtype::Q5_0, "Q5_0", {"q5_0"}},
    {ds4::test::LlamaFtype::Q2_K, "Q2_K", {"q2_K"}},
    {ds4::test::LlamaFtype::Q3_K_M, "Q3_K_M", {"q3_K", "q5_0"}},
    {ds4::test::LlamaFtype::Q3_K_L, "Q3_K_L", {"q3_K", "q5_1"}},
    {ds4::test::LlamaFtype::Q4_K_M, "Q4_K_M", {"q4_K"}},
    {ds4::test::LlamaFtype::Q5_K_M, "Q5_K_M", {"q5_K", "q5_1"}},
    {ds4::test::LlamaFtype::Q6_K, "Q6_K", {"q6_K"}},
    {ds4::test::LlamaFtype::IQ4_NL, "IQ4_NL", {"iq4_nl"}},
    {ds4::test::LlamaFtype::IQ4_XS, "IQ4_XS", {"iq4_xs", "iq4_nl"}},
    {ds4::test::LlamaFtype::IQ3_S, "IQ3_S", {"iq3_s"}},
    {ds4::test::LlamaFtype::MXFP4_MOE, "MXFP4_MOE", {"mxfp4"}, 1.0},
};

}  // namespace

TEST_F(LlamaQuantized, EveryFileTypeLoadsAndMatchesLlamaCpp) {
  std::set<std::string> seen;
  int direct = 0;
  for (const auto& c : kCases) {
    const Result r = run(c.ft, c.name);
    for (const char* t : c.must_contain) EXPECT_TRUE(r.types.count(t)) << c.name << " has no " << t << " tensor";
    seen.insert(r.types.begin(), r.types.end());
    // Both engines on the same f32 weights: float-only math, as in llama_crosscheck_test.
    EXPECT_LT(r.decoded.all, kF32Tol) << c.name;
    EXPECT_EQ(r.decoded.top1, tokens_.size()) << c.name;
    // Our quantized path vs the float reference of the same weights.
    EXPECT_LT(r.ours_vs_decoded.mean, kMeanTol) << c.name;
    EXPECT_GE(r.ours_vs_decoded.top1, tokens_.size() * 9 / 10) << c.name;
    // Against llama.cpp's own quantized path wherever that path reproduces llama.cpp's float
    // result as well as ours does (same criterion). On the AVX-512 VM llama.cpp v0.5.0's CPU
    // backend returned NaN logits on this fixture for files with q4_0, q2_K, q3_K, q6_K or mxfp4 tensors, and its
    // q4_K / q5_K files are 0.27 (mean) from its own f32 decode: those comparisons are skipped
    // and printed above.
    const bool llama_healthy = !r.llama_q_vs_decoded.nan && r.llama_q_vs_decoded.mean < kMeanTol;
    if (llama_healthy) {
      ++direct;
      EXPECT_LT(r.direct.mean, kDirectMeanTol) << c.name;
      EXPECT_LT(r.direct.all, c.direct_max) << c.name;
    }
  }
  EXPECT_GE(direct, 4);  // Q5_0, IQ4_NL, IQ4_XS, IQ3_S on llama.cpp v0.5.0
  std::string all;
  for (const auto& t : seen) all += " " + t;
  std::printf("ggml types seen:%s\n", all.c_str());
}
