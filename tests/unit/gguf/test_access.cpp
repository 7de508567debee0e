// Typed metadata access: the coercions gguf.h promises, and errors that name the key and offset.
// The file is hand-assembled, so the expected offsets come from the layout, not from our writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_bytes.h"

namespace ds4::gguf {
namespace {

using ::testing::HasSubstr;

struct GgufAccess : ::testing::Test {
  test::GgufBytes g;
  std::map<std::string, uint64_t> at;  // key -> offset
  std::optional<File> f;

  template <class T>
  void scalar(const std::string& key, uint32_t type, T v) {
    at[key] = g.size();
    g.str(key).u32(type).put(v);
  }
  template <class T>
  void array(const std::string& key, uint32_t elem, std::vector<T> v) {
    at[key] = g.size();
    g.str(key).u32(9).u32(elem).u64(v.size());
    for (auto x : v) g.put(x);
  }

  void SetUp() override {
    g.header(0, 16);
    scalar<uint8_t>("u8", 0, 200);
    scalar<int8_t>("i8", 1, -3);
    scalar<uint32_t>("u32", 4, 4000000000u);
    scalar<int32_t>("i32.neg", 5, -7);
    scalar<int32_t>("i32.pos", 5, 7);
    scalar<float>("f32", 6, 0.25f);
    scalar<uint8_t>("bool", 7, 1);
    at["str"] = g.size();
    g.str("str").u32(8).str("deepseek4");
    scalar<uint64_t>("u64.big", 10, 1ull << 63);
    scalar<int64_t>("i64", 11, -(1ll << 40));
    scalar<double>("f64", 12, 1e-6);
    array<int32_t>("arr.i32", 5, {0, 4, 128});
    array<uint32_t>("arr.u32", 4, {1, 2});
    array<float>("arr.f32", 6, {10.0f, 1.5f});
    array<uint64_t>("arr.u64.big", 10, {1ull << 63});
    at["arr.str"] = g.size();
    g.str("arr.str").u32(9).u32(8).u64(2).str("a b").str("c");
    f.emplace(File::parse(g.span(), "acc.gguf"));
  }

  // Error message of `op`, which must throw ds4::Error.
  template <class Op>
  std::string error_of(Op op) {
    try {
      op();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
  std::string where(const std::string& key) { return "acc.gguf: offset " + std::to_string(at[key]) + ": key '" + key + "'"; }
};

TEST_F(GgufAccess, AbsentKeysAreNullopt) {
  EXPECT_EQ(f->find("nope"), nullptr);
  EXPECT_FALSE(f->get_uint("nope"));
  EXPECT_FALSE(f->get_string("nope"));
  EXPECT_FALSE(f->get_float_array("nope"));
}

TEST_F(GgufAccess, IntegerCoercions) {
  EXPECT_EQ(f->get_uint("u8"), 200u);
  EXPECT_EQ(f->get_uint("i32.pos"), 7u);
  EXPECT_EQ(f->get_uint("u64.big"), 1ull << 63);
  EXPECT_EQ(f->get_int("i8"), -3);
  EXPECT_EQ(f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(f->get_int("i64"), -(1ll << 40));
  EXPECT_THAT(error_of([&] { f->get_uint("i32.neg"); }), HasSubstr(where("i32.neg") + " is i32 -7, expected an unsigned integer"));
  EXPECT_THAT(error_of([&] { f->get_int("u64.big"); }), HasSubstr(where("u64.big") + " is u64, expected an integer that fits int64"));
  EXPECT_THAT(error_of([&] { f->get_uint("f32"); }), HasSubstr(where("f32") + " is f32, expected an unsigned integer"));
  EXPECT_THAT(error_of([&] { f->get_int("bool"); }), HasSubstr(where("bool") + " is bool, expected an integer"));
}

TEST_F(GgufAccess, FloatCoercions) {
  // The spec allows float hyperparameters stored as f32, f64, u32 or i32.
  EXPECT_EQ(f->get_float("f32"), 0.25);
  EXPECT_EQ(f->get_float("f64"), 1e-6);
  EXPECT_EQ(f->get_float("u32"), 4000000000.0);
  EXPECT_EQ(f->get_float("i32.neg"), -7.0);
  EXPECT_THAT(error_of([&] { f->get_float("str"); }), HasSubstr(where("str") + " is string, expected a number"));
}

TEST_F(GgufAccess, StringAndBool) {
  EXPECT_EQ(f->get_string("str"), "deepseek4");
  EXPECT_EQ(f->get_bool("bool"), true);
  EXPECT_THAT(error_of([&] { f->get_string("u8"); }), HasSubstr(where("u8") + " is u8, expected a string"));
  EXPECT_THAT(error_of([&] { f->get_bool("u8"); }), HasSubstr(where("u8") + " is u8, expected a bool"));
}

TEST_F(GgufAccess, ArrayCoercions) {
  EXPECT_EQ(f->get_int_array("arr.i32"), (std::vector<int64_t>{0, 4, 128}));
  EXPECT_EQ(f->get_int_array("arr.u32"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f->get_float_array("arr.f32"), (std::vector<double>{10.0, 1.5}));
  EXPECT_EQ(f->get_float_array("arr.i32"), (std::vector<double>{0, 4, 128}));
  EXPECT_EQ(f->get_string_array("arr.str"), (std::vector<std::string>{"a b", "c"}));
  EXPECT_THAT(error_of([&] { f->get_int_array("arr.f32"); }), HasSubstr(where("arr.f32") + " is array[f32], expected an array of integers"));
  EXPECT_THAT(error_of([&] { f->get_int_array("arr.u64.big"); }), HasSubstr("expected an array of integers that fit int64"));
  EXPECT_THAT(error_of([&] { f->get_string_array("arr.i32"); }), HasSubstr(where("arr.i32") + " is array[i32], expected an array of strings"));
  EXPECT_THAT(error_of([&] { f->get_float_array("i32.pos"); }), HasSubstr(where("i32.pos") + " is i32, expected an array of numbers"));
}

}  // namespace
}  // namespace ds4::gguf
