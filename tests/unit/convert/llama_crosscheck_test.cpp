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
// cache (raw/SWA rows, CSA and HCA compressed rows, indexer rows). That rounding moves logits by
// ~1e-3 everywhere, and where two compressed rows are nearly tied for the indexer's 16th place
// it can swap one selected row: on this fixture that happens at position 332 with the default
// settings (0.0107 there) and at 155 and 332 with flash attention off (4.6e-3 at 155), found by
// capturing llama.cpp's lid_top_k tensor (last test). The two position ranges reported below
// are just halves of the 512 tokens (the CSA indexer has more than 16 rows to choose from after
// position ~67).
// Tolerances are stated at each check, from the measurements in the doc.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
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
    auto st = m->new_state(*be, static_cast<int64_t>(tokens_.size()));
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
// 0.0107; top-1 equal everywhere. Outside position 332 every position is within 2.6e-3; at 332
// the F16-rounded indexer keys swap one of the 16 selected CSA rows (a near tie). With F32 KV
// and flash attention on (attention K/V still cast to F16) the swap moves to position 155
// (4.4e-3). Bounds: 0.01 for 0-255 (~4x the F16 noise, room for a swap like the 4.4e-3 one) and
// 0.05 for 256-511 (5x the swap measured there); a real conversion or metadata error is far
// larger: without rope.scaling.type = "yarn" llama.cpp falls back to linear scaling and differs
// by 1.96 with 10 top-1 flips.
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

// Where the default F16 run differs most, and why: llama.cpp's indexer selection (graph tensor
// lid_top_k-1, layer 1 being the ratio-4 layer) is captured in the F32/no-FA run and in the
// default run. Measured: the 16-row sets differ at one position (332, one row swapped), which is
// also the worst position (0.0107); every other position is within 1.6e-3 of the float-only
// run. Bounds: at most 4 differing positions, and 4e-3 outside them (2.5x the F16 noise; a
// swapped row moves logits by 4e-3..1e-2 here, so the split would catch a swap the capture
// missed).
TEST_F(LlamaCrossCheck, F16GapOutsideIndexerTiesIsF16Noise) {
  std::map<std::string, std::vector<int32_t>> k32, k16;
  ds4::test::LlamaOptions f32;
  f32.kv = ds4::test::LlamaOptions::Kv::F32;
  f32.flash_attn = 0;
  f32.top_k = &k32;
  ds4::test::LlamaOptions f16;
  f16.top_k = &k16;
  const auto a = llama(f32);
  const auto b = llama(f16);
  ASSERT_EQ(k32.size(), 1u);  // flash_geom has one ratio-4 layer
  const auto& [name, sel32] = *k32.begin();
  ASSERT_TRUE(k16.count(name));
  const auto& sel16 = k16.at(name);
  ASSERT_EQ(sel32.size(), sel16.size());
  const size_t n = tokens_.size(), k = sel32.size() / n;
  EXPECT_EQ(k, 16u);
  std::vector<bool> swapped(n);
  std::string where;
  for (size_t p = 0; p < n; ++p) {
    std::set<int32_t> s32(sel32.begin() + p * k, sel32.begin() + (p + 1) * k);
    std::set<int32_t> s16(sel16.begin() + p * k, sel16.begin() + (p + 1) * k);
    swapped[p] = s32 != s16;
    if (swapped[p]) where += " " + std::to_string(p);
  }
  double inside = 0, outside = 0;
  for (size_t p = 0; p < n; ++p)
    for (size_t v = 0; v < kVocab; ++v) {
      const double d = std::fabs(a[p * kVocab + v] - b[p * kVocab + v]);
      (swapped[p] ? inside : outside) = std::max(swapped[p] ? inside : outside, d);
    }
  std::printf("%s: F16 KV changes the top-%zu set at positions:%s; max|d| there %.3g, elsewhere %.3g\n", name.c_str(),
              k, where.empty() ? " none" : where.c_str(), inside, outside);
  EXPECT_LE(std::count(swapped.begin(), swapped.end(), true), 4);
  EXPECT_LT(outside, 4e-3);
}
