// The committed quant_small/model-flash-q2.gguf is what convert-hf makes from the checkpoint
// tools/oracle/deepseek4/make_quant_model.py generates (so its transformers reference logits
// stay tied to this converter), and its tensor types follow the flash-q2 recipe (spec §3).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "convert/convert_hf.h"
#include "gguf/gguf.h"
#include "ggml_gguf.h"

namespace fs = std::filesystem;
using ds4::GgmlType;

namespace {
const std::string kGguf = std::string(DS4_FIXTURES_DIR) + "/deepseek4/quant_small/model-flash-q2.gguf";

std::vector<char> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

TEST(ConvertQuantFixture, TypesFollowTheFlashQ2Recipe) {
  auto f = ds4::gguf::File::open(kGguf);
  EXPECT_EQ(f.find_tensor("blk.2.ffn_gate_exps.weight")->type, GgmlType::IQ2_XXS);
  EXPECT_EQ(f.find_tensor("blk.2.ffn_up_exps.weight")->type, GgmlType::IQ2_XXS);
  EXPECT_EQ(f.find_tensor("blk.2.ffn_down_exps.weight")->type, GgmlType::Q2_K);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_shexp.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q_b.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.1.attn_compressor_kv.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.1.indexer.proj.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("output.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.2.exp_probs_b.bias")->type, GgmlType::F32);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_tid2eid.weight")->type, GgmlType::I32);
  ds4::test::GgmlGguf g(kGguf);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.n_tensors(), static_cast<int64_t>(f.tensors().size()));
}

TEST(ConvertQuantFixture, ConverterReproducesTheCommittedFile) {
  if (std::system("python3 -c 'import json, struct, random' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 not available to regenerate the checkpoint";
  fs::path dir = fs::temp_directory_path() / ("ds4_quant_small_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd = "python3 " + std::string(DS4_SOURCE_DIR) +
                          "/tools/oracle/deepseek4/make_quant_model.py " + dir.string() + " --seed 44";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string out = (dir / "q2.gguf").string();
  ds4::convert::ConvertOptions o{dir.string(), out, ds4::convert::Recipe::FlashQ2, 0, {}};
  ds4::convert::convert_hf(o);
  // general.name is the directory name; the committed file was converted from a directory
  // named qs_hf, so compare the tensor data sections, which hold everything else that matters.
  auto a = ds4::gguf::File::open(out);
  auto b = ds4::gguf::File::open(kGguf);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto& x = a.tensors()[i];
    const auto& y = b.tensors()[i];
    ASSERT_EQ(x.name, y.name);
    ASSERT_EQ(x.n_bytes, y.n_bytes) << x.name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.n_bytes), 0) << x.name << " differs";
  }
  fs::remove_all(dir);
}
