// Every prefix of the committed fixtures: a prefix that cuts into the header or any tensor's
// bytes is rejected with ds4::Error; prefixes that keep everything (only trailing padding cut)
// are accepted. The boundary comes from llama.cpp's reader of the full file (data offset +
// last tensor end), not from ours.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "ggml_gguf.h"

namespace ds4::gguf {
namespace {

uint64_t ggml_end_of_tensor_data(const std::string& path) {
  test::GgmlGguf g;
  auto* ctx = g.init_from_file(path.c_str(), test::gguf_init_params{true, nullptr});
  if (!ctx) throw std::runtime_error("ggml rejected " + path);
  uint64_t end = g.get_data_offset(ctx);
  for (int64_t i = 0; i < g.get_n_tensors(ctx); ++i)
    end = std::max<uint64_t>(end, g.get_data_offset(ctx) + g.get_tensor_offset(ctx, i) + g.get_tensor_size(ctx, i));
  g.free(ctx);
  return end;
}

TEST(GgufTruncation, EveryPrefixOfTinyFixture) {
  std::string path = std::string(DS4_FIXTURES_DIR) + "/gguf/tiny.gguf";
  auto bytes = test::read_all(path);
  ASSERT_GT(bytes.size(), 1000u);
  uint64_t needed = ggml_end_of_tensor_data(path);
  ASSERT_LE(needed, bytes.size());
  size_t rejected = 0;
  for (size_t n = 0; n <= bytes.size(); ++n) {
    // A copy of exactly n bytes, so ASan sees any read past the prefix.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    bool accepted = true;
    try {
      File::parse(prefix, "prefix");
    } catch (const Error& e) {
      accepted = false;
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("prefix: offset ", 0), 0u) << e.what();
    }
    EXPECT_EQ(accepted, n >= needed) << "prefix of " << n << " bytes (tensor data ends at " << needed << ")";
  }
  EXPECT_EQ(rejected, needed);
}

TEST(GgufTruncation, EveryPrefixOfNestedFixture) {
  // ggml cannot read nested arrays, so here the boundary is the file size minus at most the
  // alignment padding after the last tensor, and we only require rejection before that.
  auto bytes = test::read_all(std::string(DS4_FIXTURES_DIR) + "/gguf/nested.gguf");
  ASSERT_GT(bytes.size(), 500u);
  for (size_t n = 0; n + 64 <= bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    EXPECT_THROW(File::parse(prefix, "prefix"), Error) << n;
  }
}

}  // namespace
}  // namespace ds4::gguf
