// Second-engine cross-check (docs/LLAMA_CPP_CROSSCHECK.md): the flash_geom fixture, converted by
// convert-hf to an f32 GGUF, is run by llama.cpp v0.5.0 (deepseek4 graph), by our engine
// (model::deepseek4::Model) and compared with the transformers logits committed with the fixture.
// Each pair is reported per range of positions: top-1 agreement and max |diff|.
//
// What llama.cpp v0.5.0 computes (read from its src/models/deepseek4.cpp and
// src/llama-kv-cache.cpp; see the doc): no FP8 KV rounding and no FP4 indexer rounding (the
// indexer's Hadamard rotation is applied to both q and k, an orthogonal no-op without FP4), so
// its math is transformers' float-only math, i.e. our engine with act_quant_sim off. Its only
// deliberate precision loss is the KV cache type, F16 by default, applied to every DeepSeek V4
// cache (raw/SWA rows, CSA and HCA compressed rows, indexer rows). Positions 0..255 see only raw
// rows and HCA rows (HCA ratio 128 emits one row per 128 tokens); from 256 on, the CSA indexer
// picks its top-16 of more than 16 compressed rows, so F16-rounded indexer scores can pick
// different rows near ties, which is why the default-F16 gap grows past 256.
// Tolerances are stated at each check, from the measurements in the doc.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "convert/convert_hf.h"
#include "core/thread_pool.h"
#include "llama_runner.h"
#include "model/deepseek4/model.h"

namespace fs = std::filesystem;

namespace {

constexpr size_t kVocab = 256;
constexpr size_t kSplit = 256;  // first position where the CSA indexer must choose

std::string fixture(const std::string& f) { return std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom/" + f; }

struct Agreement {
  double max_diff = 0;
  size_t top1_equal = 0;
  size_t n = 0;
};

Agreement compare(const std::vector<float>& a, const std::vector<float>& b, size_t first, size_t last) {
  Agreement r;
  for (size_t p = first; p < last; ++p, ++r.n) {
    size_t ia = 0, ib = 0;
    for (size_t v = 0; v < kVocab; ++v) {
      const size_t k = p * kVocab + v;
      r.max_diff = std::max(r.max_diff, static_cast<double>(std::fabs(a[k] - b[k])));
      if (a[k] > a[p * kVocab + ia]) ia = v;
      if (b[k] > b[p * kVocab + ib]) ib = v;
    }
    r.top1_equal += ia == ib;
  }
  return r;
}

struct Ranges {
  Agreement lo, hi, all;
};

class LlamaCrossCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gguf_ = (fs::temp_directory_path() / ("ds4_llama_xcheck_" + std::to_string(::getpid()) + ".gguf")).string();
    ds4::convert::ConvertOptions o{std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom", gguf_,
                                   ds4::convert::Recipe::F32, 0, {}};
    ds4::convert::convert_hf(o);
    tokens_ = nlohmann::json::parse(std::ifstream(fixture("tokens.json")))["tokens"].get<std::vector<int32_t>>();
    hf_.resize(tokens_.size() * kVocab);
    std::ifstream in(fixture("logits.f32"), std::ios::binary);
    in.read(reinterpret_cast<char*>(hf_.data()), static_cast<std::streamsize>(hf_.size() * 4));
    ASSERT_TRUE(in.good()) << "short " << fixture("logits.f32");
  }
  static void TearDownTestSuite() { fs::remove(gguf_); }

  static std::vector<float> llama(const ds4::test::LlamaOptions& opt) {
    ds4::test::LlamaRunner runner;
    int32_t n_vocab = 0;
    auto out = runner.logits(gguf_, tokens_, /*incremental=*/false, &n_vocab, opt);
    EXPECT_EQ(n_vocab, static_cast<int32_t>(kVocab));
    return out;
  }

  static std::vector<float> ours(bool act_quant_sim) {
    ds4::model::deepseek4::Options o;
    o.act_quant_sim = act_quant_sim;
    auto m = ds4::model::deepseek4::Model::load(gguf_, o);
    ds4::ThreadPool pool(2);
    auto be = ds4::compute::make_cpu_backend(&pool);
    EXPECT_EQ(m->hparams().n_vocab, static_cast<int64_t>(kVocab));
    std::vector<float> out(tokens_.size() * kVocab);
    auto st = m->new_state();
    m->eval(*be, st, tokens_, out.data());
    return out;
  }

  static Ranges report(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
    const size_t n = tokens_.size();
    Ranges r{compare(a, b, 0, kSplit), compare(a, b, kSplit, n), compare(a, b, 0, n)};
    std::printf("%-44s pos 0-%zu: top1 %zu/%zu max|d| %.3g   pos %zu-%zu: top1 %zu/%zu max|d| %.3g\n", what, kSplit - 1,
                r.lo.top1_equal, r.lo.n, r.lo.max_diff, kSplit, n - 1, r.hi.top1_equal, r.hi.n, r.hi.max_diff);
    ::testing::Test::RecordProperty(std::string(what) + " max_abs_diff", std::to_string(r.all.max_diff));
    return r;
  }

  static inline std::string gguf_;
  static inline std::vector<int32_t> tokens_;
  static inline std::vector<float> hf_;
};

}  // namespace

// llama.cpp with an F32 KV cache and flash attention off (with flash attention on, llama.cpp
// casts F32 K/V to F16 before ggml_flash_attn_ext, so F32 KV alone still rounds) is float-only
// math end to end. Measured: 7.9e-6 vs our engine, 1.1e-5 vs transformers, top-1 equal at all
// 512 positions. What is left is f32 summation order (ggml's SIMD dot products, our kernels,
// PyTorch's); 1e-4 keeps a ~10x margin and is 100x below the F16-KV noise below, so it would
// catch any real difference in the math (a missed rounding step moves logits by 0.1-1).
TEST_F(LlamaCrossCheck, F32KvNoFlashAttnMatchesOurEngineAndTransformers) {
  ds4::test::LlamaOptions opt;
  opt.kv = ds4::test::LlamaOptions::Kv::F32;
  opt.flash_attn = 0;
  const auto l = llama(opt);
  const auto o = ours(/*act_quant_sim=*/false);
  for (const auto& r : {report("llama F32 KV, no FA vs ours (sim off)", l, o),
                        report("llama F32 KV, no FA vs transformers", l, hf_),
                        report("ours (sim off) vs transformers", o, hf_)}) {
    EXPECT_EQ(r.lo.top1_equal, r.lo.n);
    EXPECT_EQ(r.hi.top1_equal, r.hi.n);
    EXPECT_LT(r.lo.max_diff, 1e-4);
    EXPECT_LT(r.hi.max_diff, 1e-4);
  }
}

// llama.cpp as it runs by default (F16 KV cache, flash attention auto = on). Measured vs our
// engine (sim off): 1.6e-3 in positions 0-255, 0.0106 in 256-511; vs transformers 1.6e-3 and
// 0.0107; top-1 equal everywhere. With F32 KV and flash attention on (attention K/V still cast
// to F16, indexer rows now F32) the second range drops to 1.2e-3, so the jump past 256 most
// likely comes from the F16 indexer rows (they only matter through the top-16 choice, which
// starts at 256; not traced further). Bounds: 0.01 for 0-255 (6x the measurement) and 0.05 for 256-511 (5x); a real
// conversion or metadata error is far larger: without rope.scaling.type = "yarn" llama.cpp
// falls back to linear scaling and differs by 1.96 with 10 top-1 flips.
TEST_F(LlamaCrossCheck, DefaultF16KvMatchesWithinF16Rounding) {
  const auto l = llama({});
  const auto o = ours(/*act_quant_sim=*/false);
  for (const auto& r : {report("llama default (F16 KV, FA) vs ours (sim off)", l, o),
                        report("llama default (F16 KV, FA) vs transformers", l, hf_)}) {
    EXPECT_EQ(r.lo.top1_equal, r.lo.n);
    EXPECT_EQ(r.hi.top1_equal, r.hi.n);
    EXPECT_LT(r.lo.max_diff, 0.01);
    EXPECT_LT(r.hi.max_diff, 0.05);
  }
  ds4::test::LlamaOptions f32_fa;
  f32_fa.kv = ds4::test::LlamaOptions::Kv::F32;
  report("llama F32 KV, FA (K/V cast to F16) vs ours", llama(f32_fa), o);
}

// llama.cpp v0.5.0 applies none of the FP8 KV / FP4 indexer rounding of spec §5.2-5.4: our
// engine with that rounding on is ~0.95 away from it (and from transformers) on this fixture
// while the float-only engine is 1e-5 away. This pins the fact the doc states; if a later
// llama.cpp adds the rounding this fails and the doc and the tests above need redoing.
TEST_F(LlamaCrossCheck, LlamaCppDoesNotApplyActivationRounding) {
  ds4::test::LlamaOptions opt;
  opt.kv = ds4::test::LlamaOptions::Kv::F32;
  opt.flash_attn = 0;
  const auto l = llama(opt);
  const auto r = report("llama F32 KV, no FA vs ours (sim on)", l, ours(/*act_quant_sim=*/true));
  EXPECT_GT(r.all.max_diff, 0.1);
}
