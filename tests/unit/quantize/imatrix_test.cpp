// llama.cpp's GGUF imatrix format: what we write is read back unchanged, ggml's own GGUF reader
// sees the keys and tensors llama-quantize looks for, and damaged files give clear errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quantize/imatrix.h"
#include "unit/convert/ggml_gguf.h"

using namespace ds4;
using namespace ds4::quantize;
namespace fs = std::filesystem;

namespace {

std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ds4_imatrix_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

Imatrix sample() {
  Imatrix m;
  m.datasets = {"kjv-train.txt"};
  m.chunk_count = 3;
  m.chunk_size = 256;
  ImatrixEntry dense;
  dense.ne0 = 4;
  dense.sums = {1, 2, 3, 4};
  dense.counts = {8};
  m.entries["blk.0.attn_q_a.weight"] = dense;
  ImatrixEntry exps;  // 3 experts of 2 columns; expert 1 never routed
  exps.ne0 = 2;
  exps.sums = {0.5, 1.5, 0, 0, 6, 9};
  exps.counts = {2, 0, 3};
  m.entries["blk.0.ffn_up_exps.weight"] = exps;
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Imatrix, RoundTripAndWeights) {
  const std::string p = tmp("a.imatrix.gguf");
  write_imatrix(p, sample());
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  const Imatrix m = read_imatrix(p);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"kjv-train.txt"});
  EXPECT_EQ(m.chunk_count, 3u);
  EXPECT_EQ(m.chunk_size, 256u);
  ASSERT_EQ(m.entries.size(), 2u);
  const auto& e = m.entries.at("blk.0.ffn_up_exps.weight");
  EXPECT_EQ(e.ne0, 2);
  EXPECT_EQ(e.sums, (std::vector<double>{0.5, 1.5, 0, 0, 6, 9}));
  EXPECT_EQ(e.counts, (std::vector<double>{2, 0, 3}));
  // llama-quantize: sum / count per expert; all ones for an expert with count 0.
  EXPECT_EQ(m.weights("blk.0.ffn_up_exps.weight", 0, 2, 3), (std::vector<float>{0.25f, 0.75f}));
  EXPECT_EQ(m.weights("blk.0.ffn_up_exps.weight", 1, 2, 3), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(m.weights("blk.0.ffn_up_exps.weight", 2, 2, 3), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(m.weights("blk.0.attn_q_a.weight", 0, 4, 1), (std::vector<float>{0.125f, 0.25f, 0.375f, 0.5f}));
  EXPECT_TRUE(m.weights("output.weight", 0, 4, 1).empty());
  EXPECT_NE(error_of([&] { m.weights("blk.0.attn_q_a.weight", 0, 8, 1); }).find("an imatrix of another model"),
            std::string::npos);

  Imatrix twice = m;
  twice.merge(m);
  EXPECT_EQ(twice.entries.at("blk.0.attn_q_a.weight").counts[0], 16);
  EXPECT_EQ(twice.chunk_count, 6u);
}

// The layout llama.cpp's loader (common/imatrix-loader.cpp) expects, checked with ggml's reader.
TEST(Imatrix, GgmlReaderSeesLlamaCppLayout) {
  const std::string p = tmp("b.imatrix.gguf");
  write_imatrix(p, sample());
  test::GgmlGguf g(p);
  ASSERT_TRUE(g.ok());
  auto get_str = test::ggml_fn<const char* (*)(const void*, int64_t)>("gguf_get_val_str");
  ASSERT_GE(g.find_key("general.type"), 0);
  EXPECT_STREQ(get_str(g.ctx, g.find_key("general.type")), "imatrix");
  EXPECT_EQ(g.u32("imatrix.chunk_count"), 3u);
  EXPECT_EQ(g.u32("imatrix.chunk_size"), 256u);
  EXPECT_EQ(g.arr_n("imatrix.datasets"), 1u);
  ASSERT_EQ(g.n_tensors(), 4);
  std::map<std::string, std::pair<int, size_t>> t;
  for (int64_t i = 0; i < g.n_tensors(); ++i) t[g.tensor_name(i)] = {g.tensor_type(i), g.tensor_size(i)};
  EXPECT_EQ(t["blk.0.ffn_up_exps.weight.in_sum2"], (std::pair<int, size_t>{0, 6 * 4}));  // GGML_TYPE_F32 = 0
  EXPECT_EQ(t["blk.0.ffn_up_exps.weight.counts"], (std::pair<int, size_t>{0, 3 * 4}));
  EXPECT_EQ(t["blk.0.attn_q_a.weight.in_sum2"], (std::pair<int, size_t>{0, 4 * 4}));
  EXPECT_EQ(t["blk.0.attn_q_a.weight.counts"], (std::pair<int, size_t>{0, 1 * 4}));
  // And our reader's shapes: in_sum2 [ne0, n_mat], counts [1, n_mat].
  auto f = gguf::File::open(p);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight.in_sum2")->ne, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight.counts")->ne, (std::vector<uint64_t>{1, 3}));
  // A 2-D weight's entry is 1-D, as llama-imatrix writes it (ggml drops trailing 1 dims).
  EXPECT_EQ(f.find_tensor("blk.0.attn_q_a.weight.in_sum2")->ne, (std::vector<uint64_t>{4}));
  EXPECT_EQ(f.find_tensor("blk.0.attn_q_a.weight.counts")->ne, (std::vector<uint64_t>{1}));
}

// llama-imatrix's layout for a grouped projection: G slices side by side, one count per token.
TEST(Imatrix, FoldsLlamaCppGroupedEntries) {
  Imatrix m;
  ImatrixEntry e;
  e.ne0 = 6;  // 2 groups of 3 columns
  e.sums = {1, 2, 3, 5, 6, 7};
  e.counts = {2};
  m.entries["blk.0.attn_output_a.weight"] = e;
  // Column j: (sum over both slices) / (2 tokens x 2 slices).
  EXPECT_EQ(m.weights("blk.0.attn_output_a.weight", 0, 3, 1), (std::vector<float>{1.5f, 2.0f, 2.5f}));
  EXPECT_NE(error_of([&] { m.weights("blk.0.attn_output_a.weight", 0, 4, 1); }).find("another model"), std::string::npos);
}

TEST(Imatrix, BadFiles) {
  const std::string p = tmp("c.imatrix.gguf");
  write_imatrix(p, sample());
  // Truncated: the reader names the file and the offset.
  const auto size = fs::file_size(p);
  const std::string cut = tmp("cut.imatrix.gguf");
  fs::copy_file(p, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, size / 2);
  const std::string e1 = error_of([&] { read_imatrix(cut); });
  EXPECT_NE(e1.find(cut), std::string::npos) << e1;
  EXPECT_FALSE(e1.empty());

  // Not an imatrix (a GGUF without general.type = imatrix).
  const std::string other = tmp("other.gguf");
  {
    gguf::Writer w(other);
    w.add_kv("general.architecture", gguf::Value::string("deepseek4"));
    w.write_header();
    w.finish();
  }
  EXPECT_NE(error_of([&] { read_imatrix(other); }).find("not an imatrix file"), std::string::npos);

  // A sum without its counts.
  const std::string lone = tmp("lone.gguf");
  {
    gguf::Writer w(lone);
    w.add_kv("general.type", gguf::Value::string("imatrix"));
    w.add_kv("imatrix.datasets", gguf::Value::string_array({"x"}));
    w.add_kv("imatrix.chunk_count", gguf::Value::u32(1));
    w.add_kv("imatrix.chunk_size", gguf::Value::u32(1));
    w.add_tensor("a.weight.in_sum2", GgmlType::F32, {2, 1});
    w.write_header();
    std::vector<float> v{1, 2};
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(v.data()), 8});
    w.finish();
  }
  EXPECT_NE(error_of([&] { read_imatrix(lone); }).find("has no a.weight.counts"), std::string::npos);

  // Counts that do not match the sums' matrix count; a negative sum.
  auto write_pair = [&](const std::string& path, std::vector<uint64_t> cne, float first) {
    gguf::Writer w(path);
    w.add_kv("general.type", gguf::Value::string("imatrix"));
    w.add_kv("imatrix.datasets", gguf::Value::string_array({"x"}));
    w.add_kv("imatrix.chunk_count", gguf::Value::u32(1));
    w.add_kv("imatrix.chunk_size", gguf::Value::u32(1));
    w.add_tensor("a.weight.in_sum2", GgmlType::F32, {2, 2});
    w.add_tensor("a.weight.counts", GgmlType::F32, cne);
    w.write_header();
    std::vector<float> v{first, 2, 3, 4};
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(v.data()), 16});
    std::vector<float> c(cne[0] * (cne.size() > 1 ? cne[1] : 1), 1.0f);
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(c.data()), c.size() * 4});
    w.finish();
  };
  const std::string bad = tmp("bad.gguf");
  write_pair(bad, {1, 3}, 1);
  EXPECT_NE(error_of([&] { read_imatrix(bad); }).find("has 3 counts (expected [1, 2])"), std::string::npos);
  write_pair(bad, {1, 2}, -1);
  EXPECT_NE(error_of([&] { read_imatrix(bad); }).find("element 0 is -1"), std::string::npos);
  write_pair(bad, {1, 2}, 1);
  EXPECT_NO_THROW(read_imatrix(bad));
}
