// ds4-gguf convert-hf / synth as a user runs them: exit status 0 on success, 2 on a usage error,
// 1 with a one-line message naming the problem otherwise, and no output file after a failure.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "gguf/gguf.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

}  // namespace

TEST(ConvertCli, ConvertHfWritesAValidFile) {
  if (!fs::exists(std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf")) GTEST_SKIP() << "ds4-gguf not built";
  const std::string out = tmp("swa.gguf");
  auto r = run("convert-hf --hf " + std::string(DS4_FIXTURES_DIR) + "/deepseek4/swa_tiny --out " + out +
               " --type f16 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos) << r.output;
  auto f = ds4::gguf::File::open(out);
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek4");
  EXPECT_EQ(f.find_tensor("blk.1.attn_q_b.weight")->type, ds4::GgmlType::F16);
}

TEST(ConvertCli, ConvertHfErrors) {
  if (!fs::exists(std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf")) GTEST_SKIP() << "ds4-gguf not built";
  EXPECT_EQ(run("convert-hf").status, 2);
  EXPECT_EQ(run("convert-hf --hf x --out y --bogus").status, 2);
  auto r = run("convert-hf --hf " + std::string(DS4_FIXTURES_DIR) + "/deepseek4/swa_tiny --out " + tmp("x.gguf") +
               " --type q3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("unknown --type 'q3'"), std::string::npos) << r.output;
  r = run("convert-hf --hf /nonexistent/ckpt --out " + tmp("y.gguf"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/ckpt: not a directory"), std::string::npos) << r.output;
  const std::string out = tmp("q4.gguf");
  r = run("convert-hf --hf " + std::string(DS4_FIXTURES_DIR) + "/deepseek4/flash_geom --out " + out +
          " --type flash-q4 --quiet");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("multiple of 256"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ConvertCli, SynthSparse) {
  if (!fs::exists(std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf")) GTEST_SKIP() << "ds4-gguf not built";
  const std::string out = tmp("synth.gguf");
  auto r = run("synth --preset flash-q4 --layers 4 --sparse-all --seed 3 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  auto f = ds4::gguf::File::open(out);
  EXPECT_EQ(f.get_uint("deepseek4.block_count"), 4u);
  EXPECT_EQ(f.find_tensor("blk.3.ffn_down_exps.weight")->type, ds4::GgmlType::Q4_K);
  EXPECT_EQ(run("synth --preset flash-q9 --out " + out).status, 1);
  EXPECT_EQ(run("synth --layers 0 --out " + out).status, 1);
  EXPECT_EQ(run("synth --preset flash-q2").status, 2);  // no --out
}
