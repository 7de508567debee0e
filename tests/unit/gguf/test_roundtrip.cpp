// Writer -> reader round trips: every value type (including nested arrays, which ggml cannot
// represent, so our own reader is the only one that can check them), every tensor type, and
// the writer's own rules (order, sizes, tmp file handling).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"

namespace ds4::gguf {
namespace {

using ::testing::HasSubstr;

std::vector<KeyValue> every_value_type() {
  Value inner_u8 = Value::array(ValueType::U8, {Value::u8(1), Value::u8(2)});
  Value inner_str = Value::string_array({"x", ""});
  Value deep = inner_u8;
  for (uint32_t i = 2; i < Limits::max_array_depth; ++i) deep = Value::array(ValueType::ARRAY, {deep});
  return {
      {"u8", Value::u8(0xff)},
      {"i8", Value::i8(-128)},
      {"u16", Value::u16(0xffff)},
      {"i16", Value::i16(-32768)},
      {"u32", Value::u32(0xffffffffu)},
      {"i32", Value::i32(std::numeric_limits<int32_t>::min())},
      {"f32", Value::f32(-1.5e-39f)},  // a subnormal survives the double round trip
      {"f32.nan", Value::f32(std::numeric_limits<float>::quiet_NaN())},
      {"bool.t", Value::boolean(true)},
      {"bool.f", Value::boolean(false)},
      {"string", Value::string(std::string("nul\0inside", 10))},
      {"string.empty", Value::string("")},
      {"u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"f64", Value::f64(std::numeric_limits<double>::denorm_min())},
      {"arr.f32", Value::array(ValueType::F32, {Value::f32(1), Value::f32(-0.0f)})},
      {"arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true)})},
      {"arr.empty", Value::array(ValueType::U64, {})},
      {"arr.nested", Value::array(ValueType::ARRAY, {inner_u8, inner_str, Value::array(ValueType::I16, {})})},
      {"arr.deepest", Value::array(ValueType::ARRAY, {deep})},
  };
}

TEST(GgufRoundTrip, EveryValueTypeIncludingNestedArrays) {
  test::TempDir dir;
  std::string path = dir.file("v.gguf");
  auto kvs = every_value_type();
  {
    Writer w(path);
    for (const auto& kv : kvs) w.add_kv(kv.key, kv.value);
    w.finish();  // no tensors: header only
  }
  File f = File::open(path);
  ASSERT_EQ(f.metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].key, kvs[i].key);
    EXPECT_TRUE(f.metadata()[i].value == kvs[i].value) << kvs[i].key << " is " << describe_type(f.metadata()[i].value);
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufRoundTrip, ValueEncodingMatchesTheSpecByteForByte) {
  // Hand-assembled expectation (GGUF v3 spec) for one key of each encoding family.
  test::TempDir dir;
  std::string path = dir.file("bytes.gguf");
  {
    Writer w(path);
    w.add_kv("a", Value::i16(-2));
    w.add_kv("b", Value::array(ValueType::ARRAY, {Value::string_array({"hi"})}));
    w.finish();
  }
  test::GgufBytes want;
  want.header(0, 2);
  want.str("a").u32(3).put<int16_t>(-2);
  want.str("b").u32(9).u32(9).u64(1).u32(8).u64(1).str("hi");
  want.pad(32);
  EXPECT_EQ(test::read_all(path), want.b);
}

TEST(GgufRoundTrip, EveryTensorTypeAndShape) {
  test::TempDir dir;
  std::string path = dir.file("t.gguf");
  struct T {
    GgmlType type;
    std::vector<uint64_t> ne;
  };
  std::vector<T> decl = {{GgmlType::F32, {5}},           {GgmlType::F16, {3, 3}},     {GgmlType::BF16, {1, 1, 7}},
                         {GgmlType::Q8_0, {32, 1, 1, 3}}, {GgmlType::Q2_K, {256, 2}},  {GgmlType::Q4_K, {768}},
                         {GgmlType::Q8_K, {256, 1, 2}},   {GgmlType::IQ2_XXS, {512}}, {GgmlType::I32, {6, 5}}};
  std::vector<std::vector<uint8_t>> data;
  {
    Writer w(path);
    w.add_kv("general.alignment", Value::u32(128));
    for (size_t i = 0; i < decl.size(); ++i) w.add_tensor("t" + std::to_string(i), decl[i].type, decl[i].ne);
    w.write_header();
    for (size_t i = 0; i < decl.size(); ++i) {
      const auto& tr = traits(decl[i].type);
      uint64_t n = 1;
      for (auto d : decl[i].ne) n *= d;
      std::vector<uint8_t> bytes(n / tr.block_elems * tr.block_bytes);
      for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(i * 37 + k);
      w.write_tensor_data(bytes);
      data.push_back(std::move(bytes));
    }
    w.finish();
  }
  File f = File::open(path);
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.data_offset() % 128, 0u);
  ASSERT_EQ(f.tensors().size(), decl.size());
  uint64_t expect_offset = 0;
  for (size_t i = 0; i < decl.size(); ++i) {
    const auto& t = f.tensors()[i];
    EXPECT_EQ(t.type, decl[i].type);
    EXPECT_EQ(t.ne, decl[i].ne);
    EXPECT_EQ(t.n_bytes, data[i].size());
    EXPECT_EQ(t.offset, expect_offset);  // packed in declaration order, each start aligned
    EXPECT_EQ(std::memcmp(t.data, data[i].data(), t.n_bytes), 0);
    expect_offset += (t.n_bytes + 127) / 128 * 128;
  }
  // ggml pads after the last tensor as well; so do we.
  EXPECT_EQ(f.file_size(), f.data_offset() + expect_offset);
}

TEST(GgufWriter, RejectsBadDeclarations) {
  test::TempDir dir;
  auto expect_error = [&](auto&& op, const std::string& what) {
    Writer w(dir.file("x.gguf"));
    try {
      op(w);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_error([](Writer& w) { w.add_kv("", Value::u8(1)); }, "metadata key is empty");
  expect_error([](Writer& w) { w.add_kv("k", Value::u8(1)); w.add_kv("k", Value::u8(2)); }, "duplicate metadata key 'k'");
  expect_error([](Writer& w) { w.add_kv("general.alignment", Value::u64(32)); }, "must be u32");
  expect_error([](Writer& w) { w.add_kv("general.alignment", Value::u32(24)); }, "nonzero power of two");
  expect_error([](Writer& w) { Value v = Value::u8(1); v.v = uint64_t{256}; w.add_kv("k", v); }, "out of range");
  expect_error([](Writer& w) { Value v = Value::u32(1); v.v = std::string("x"); w.add_kv("k", v); }, "different C++ type");
  expect_error([](Writer& w) { w.add_tensor("", GgmlType::F32, {1}); }, "tensor name is empty");
  expect_error([](Writer& w) { w.add_tensor(std::string(64, 'n'), GgmlType::F32, {1}); }, "longer than 63");
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::F32, {1}); w.add_tensor("a", GgmlType::F32, {1}); }, "duplicate tensor name 'a'");
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::F32, {}); }, "0 dims");
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::F32, {1, 1, 1, 1, 1}); }, "5 dims");
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::F32, {2, 0}); }, "a dimension is 0");
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::Q4_K, {128}); }, "not a multiple of the q4_K block size 256");
  expect_error([](Writer& w) { w.add_tensor("a", static_cast<GgmlType>(3), {32}); }, "unknown ggml type id 3");  // Q4_1
  expect_error([](Writer& w) { w.add_tensor("a", GgmlType::F32, {1ull << 62, 4}); }, "overflows");
  EXPECT_THROW(Value::array(ValueType::U8, {Value::i8(1)}), Error);
}

TEST(GgufWriter, EnforcesStreamingOrderAndSizes) {
  test::TempDir dir;
  std::string path = dir.file("s.gguf");
  std::vector<uint8_t> eight(8, 1);
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {2});
    EXPECT_THROW(w.write_tensor_data(eight), Error);  // before write_header
  }
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {2});
    w.write_header();
    EXPECT_THROW(w.add_kv("late", Value::u8(1)), Error);
  }
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {2});
    w.write_header();
    w.write_tensor_data(eight);
    std::vector<uint8_t> one(1, 0);
    try {
      w.write_tensor_data(one);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("beyond the last declared tensor"));
    }
    // The error abandoned the file.
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {2});
    w.write_header();
    w.write_tensor_data(std::span<const uint8_t>(eight).first(5));
    try {
      w.finish();
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("tensor 'a' has 5 of 8 bytes written"));
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufWriter, TmpFileUntilFinishThenRenamed) {
  test::TempDir dir;
  std::string path = dir.file("r.gguf");
  test::write_all(path, std::vector<uint8_t>{'o', 'l', 'd'});
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {1});
    w.write_header();
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(test::read_all(path).size(), 3u);  // the old file is untouched while writing
    // destroyed without finish()
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(test::read_all(path), (std::vector<uint8_t>{'o', 'l', 'd'}));
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {1});
    w.write_header();
    float x = 2.0f;
    w.write_tensor_data({reinterpret_cast<const uint8_t*>(&x), 4});
    w.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  File f = File::open(path);
  float got;
  std::memcpy(&got, f.find_tensor("a")->data, 4);
  EXPECT_EQ(got, 2.0f);
}

TEST(GgufWriter, SkippedTensorDataReadsBackAsZeros) {
  test::TempDir dir;
  std::string path = dir.file("sparse.gguf");
  {
    Writer w(path);
    w.add_tensor("a", GgmlType::F32, {3});
    w.add_tensor("b", GgmlType::F32, {5});  // last tensor skipped: the file must still be full size
    w.write_header();
    std::vector<uint8_t> head(4, 0xAB);
    w.write_tensor_data(head);
    w.skip_tensor_data(8 + 20);
    w.finish();
  }
  File f = File::open(path);
  const auto* a = f.find_tensor("a");
  const auto* b = f.find_tensor("b");
  EXPECT_EQ(a->data[0], 0xAB);
  for (int i = 4; i < 12; ++i) EXPECT_EQ(a->data[i], 0) << i;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b->data[i], 0) << i;
  EXPECT_EQ(f.file_size(), f.data_offset() + 32 + 32);  // both padded to 32
}

TEST(GgufWriter, UnwritableDirectoryIsAnError) {
  Writer w("/nonexistent-dir/x.gguf");
  try {
    w.write_header();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot create /nonexistent-dir/x.gguf.tmp"));
  }
}

}  // namespace
}  // namespace ds4::gguf
