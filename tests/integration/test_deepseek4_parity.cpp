// Parity with HF transformers 5.17 (the oracle; fixtures from tools/oracle/deepseek4):
// each fixture's safetensors checkpoint is converted with `ds4-gguf convert-hf --type f32`,
// evaluated by `ds4 --dump-logits --act-quant-sim off` as one prefill and token by token,
// and compared with transformers' prefill logits at every position (the fixture README
// shows transformers' own cached decode agrees with them to < 1e-5).
//
// Tolerance 1e-3 (the contract). transformers' own prefill/decode paths differ by up to
// 1e-5 on these fixtures, and this engine measures about 1e-5; 1e-3 leaves room for
// summation-order differences but would catch any formula error (logits have std ~1).
//
// quant_small is a flash-q2 GGUF (IQ2_XXS / Q2_K experts, Q8_0 / F16 rest) whose reference
// logits come from transformers running the GGUF's weights decoded by ggml. With --float-acts
// the engine multiplies the same decoded weights with f32 activations, so the same 1e-3
// holds; with its normal Q8_0/Q8_K activation quantization (as ds4 and ggml do) only a loose
// agreement is expected (measured: max 0.94, mean 0.023, argmax equal at 245 of 256).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "common/test_paths.h"

namespace fs = std::filesystem;

namespace {

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

int run(const std::string& cmd) {
  int rc = std::system((cmd + " > /dev/null 2>&1").c_str());
  return rc;
}

struct Result {
  double max_abs = 0;
  int64_t worst_pos = -1;
  bool argmax_all = true;
};

Result compare(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  Result r;
  const int64_t n = static_cast<int64_t>(want.size()) / V;
  for (int64_t t = 0; t < n; ++t) {
    int64_t ag = 0, aw = 0;
    for (int64_t i = 0; i < V; ++i) {
      double d = std::fabs(static_cast<double>(got[t * V + i]) - want[t * V + i]);
      if (d > r.max_abs) r.max_abs = d, r.worst_pos = t;
      if (got[t * V + i] > got[t * V + ag]) ag = i;
      if (want[t * V + i] > want[t * V + aw]) aw = i;
    }
    r.argmax_all &= ag == aw;
  }
  return r;
}

class Parity : public ::testing::TestWithParam<const char*> {};

std::string token_arg(const fs::path& dir) {
  auto toks = nlohmann::json::parse(std::ifstream(dir / "tokens.json"))["tokens"].get<std::vector<int>>();
  std::string s;
  for (int t : toks) {
    if (!s.empty()) s += ',';
    s += std::to_string(t);
  }
  return s;
}

double mean_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(static_cast<double>(a[i]) - b[i]);
  return s / static_cast<double>(a.size());
}

}  // namespace

TEST_P(Parity, ConvertedF32MatchesTransformers) {
  const fs::path dir = fs::path(DS4_FIXTURES_DIR) / "deepseek4" / GetParam();
  ASSERT_TRUE(fs::exists(dir / "model.safetensors")) << dir;
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  const int64_t V = cfg["vocab_size"].get<int64_t>();
  const std::string tok_arg = token_arg(dir);

  const fs::path work = ds4::test::test_tmp_dir() / (std::string("ds4_parity_") + GetParam());
  fs::create_directories(work);
  const fs::path gguf = work / "model.gguf";
  ASSERT_EQ(run(std::string(DS4_GGUF_BIN) + " convert-hf --hf " + dir.string() + " --out " + gguf.string() +
                " --type f32"),
            0);

  const auto want = read_f32(dir / "logits.f32");
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.size() % static_cast<size_t>(V), 0u);
  for (bool incremental : {false, true}) {
    const fs::path out = work / (incremental ? "inc.f32" : "prefill.f32");
    ASSERT_EQ(run(std::string(DS4_BIN) + " -m " + gguf.string() + " --tokens " + tok_arg + " --dump-logits " +
                  out.string() + " --act-quant-sim off" + (incremental ? " --incremental" : "")),
              0);
    const auto got = read_f32(out);
    ASSERT_EQ(got.size(), want.size());
    Result r = compare(got, want, V);
    std::printf("[parity] %s %s: max|dlogit| = %.3g (worst position %lld), argmax %s\n", GetParam(),
                incremental ? "incremental" : "prefill", r.max_abs, static_cast<long long>(r.worst_pos),
                r.argmax_all ? "agrees everywhere" : "DIFFERS");
    EXPECT_LE(r.max_abs, 1e-3) << "worst position " << r.worst_pos;
    EXPECT_TRUE(r.argmax_all);
  }
  fs::remove_all(work);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::Values("swa_tiny", "mixed_small", "flash_geom"));

TEST(QuantParity, FlashQ2FileMatchesTransformersOnDecodedWeights) {
  const fs::path dir = fs::path(DS4_FIXTURES_DIR) / "deepseek4" / "quant_small";
  const fs::path gguf = dir / "model-flash-q2.gguf";
  ASSERT_TRUE(fs::exists(gguf)) << gguf;
  const int64_t V = 256;
  const auto want = read_f32(dir / "logits.f32");
  ASSERT_EQ(want.size() % V, 0u);
  const fs::path work = ds4::test::test_tmp_dir() / "ds4_parity_quant";
  fs::create_directories(work);
  std::vector<float> q8_prefill;
  for (bool float_acts : {true, false})
    for (bool incremental : {false, true}) {
      const fs::path out = work / "out.f32";
      ASSERT_EQ(run(std::string(DS4_BIN) + " -m " + gguf.string() + " --tokens " + token_arg(dir) + " --dump-logits " +
                    out.string() + " --act-quant-sim off" + (float_acts ? " --float-acts" : "") +
                    (incremental ? " --incremental" : "")),
                0);
      const auto got = read_f32(out);
      ASSERT_EQ(got.size(), want.size());
      Result r = compare(got, want, V);
      std::printf("[parity] quant_small %s, %s: max|dlogit| = %.3g, mean %.3g\n",
                  float_acts ? "f32 activations" : "Q8_0/Q8_K activations", incremental ? "incremental" : "prefill",
                  r.max_abs, mean_abs_diff(got, want));
      if (float_acts) {
        EXPECT_LE(r.max_abs, 1e-3);
        EXPECT_TRUE(r.argmax_all);
      } else {
        // Activation rounding only: small on average, never a different model.
        EXPECT_LE(mean_abs_diff(got, want), 0.05);
        if (incremental) EXPECT_LE(compare(got, q8_prefill, V).max_abs, 1e-4);  // same path both ways
        else q8_prefill = got;
      }
    }
  fs::remove_all(work);
}

// The q8_0 recipe (every matrix, routed experts included, in Q8_0). Its GGUF (4 MB) is not
// committed: make_quant_model.py (pure Python, seed 44) rebuilds the checkpoint and convert-hf
// rebuilds the file, which is deterministic; logits-q8_0.f32 is transformers on that file's
// weights decoded by ggml (quant_reference.py on the GPU machine, the same run reproduced the
// committed flash-q2 reference byte for byte).
TEST(QuantParity, Q8_0FileMatchesTransformersOnDecodedWeights) {
  const fs::path dir = fs::path(DS4_FIXTURES_DIR) / "deepseek4" / "quant_small";
  const int64_t V = 256;
  const auto want = read_f32(dir / "logits-q8_0.f32");
  ASSERT_EQ(want.size() % V, 0u);
  const fs::path work = ds4::test::test_tmp_dir() / "ds4_parity_q8_0";
  fs::remove_all(work);
  fs::create_directories(work);
  ASSERT_EQ(run("python3 " + std::string(DS4_SOURCE_DIR) + "/tools/oracle/deepseek4/make_quant_model.py " +
                (work / "hf").string() + " --seed 44 > /dev/null"),
            0);
  const fs::path gguf = work / "model-q8_0.gguf";
  ASSERT_EQ(run(std::string(DS4_GGUF_BIN) + " convert-hf --hf " + (work / "hf").string() + " --out " + gguf.string() +
                " --type q8_0 > /dev/null"),
            0);
  for (bool incremental : {false, true}) {
    const fs::path out = work / "out.f32";
    ASSERT_EQ(run(std::string(DS4_BIN) + " -m " + gguf.string() + " --tokens " + token_arg(dir) + " --dump-logits " +
                  out.string() + " --act-quant-sim off --float-acts" + (incremental ? " --incremental" : "")),
              0);
    const auto got = read_f32(out);
    ASSERT_EQ(got.size(), want.size());
    Result r = compare(got, want, V);
    std::printf("[parity] quant_small q8_0, f32 activations, %s: max|dlogit| = %.3g\n",
                incremental ? "incremental" : "prefill", r.max_abs);
    EXPECT_LE(r.max_abs, 1e-3);
    EXPECT_TRUE(r.argmax_all);
  }
  fs::remove_all(work);
}

TEST(Ds4Cli, ErrorsExitNonZeroWithMessage) {
  const fs::path work = ds4::test::test_tmp_dir() / "ds4_cli_err";
  fs::create_directories(work);
  EXPECT_NE(run(std::string(DS4_BIN) + " -m " + (work / "nope.gguf").string() + " --tokens 1 --dump-logits " +
                (work / "o.f32").string()),
            0);
  EXPECT_NE(run(std::string(DS4_BIN) + " -m x --tokens 1,a --dump-logits o"), 0);
  fs::remove_all(work);
}
