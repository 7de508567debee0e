// Our reader and writer against llama.cpp's GGUF implementation (libggml-base.so):
//  * files our Writer produced are parsed by ggml and every key, value, tensor name, shape, type,
//    offset and byte agrees with what we wrote;
//  * a file ggml's writer produced is parsed by our reader with the same result as ggml's reader;
//  * the committed fixture reads the same through both.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "ggml_gguf.h"

namespace ds4::gguf {
namespace {

using test::GgmlGguf;

const GgmlGguf& G() {
  static GgmlGguf g;
  return g;
}

struct GgmlFile {
  test::gguf_context* ctx = nullptr;
  explicit GgmlFile(const std::string& path) {
    ctx = G().init_from_file(path.c_str(), test::gguf_init_params{true, nullptr});
  }
  ~GgmlFile() {
    if (ctx) G().free(ctx);
  }
};

// One element of a ggml array, as our Value, read through ggml's typed accessors.
Value ggml_array_item(const test::gguf_context* c, int64_t k, ValueType t, size_t i) {
  const void* d = t == ValueType::STRING ? nullptr : G().get_arr_data(c, k);
  auto at = [&](auto* p) { return p[i]; };
  switch (t) {
    case ValueType::U8: return Value::u8(at(static_cast<const uint8_t*>(d)));
    case ValueType::I8: return Value::i8(at(static_cast<const int8_t*>(d)));
    case ValueType::U16: return Value::u16(at(static_cast<const uint16_t*>(d)));
    case ValueType::I16: return Value::i16(at(static_cast<const int16_t*>(d)));
    case ValueType::U32: return Value::u32(at(static_cast<const uint32_t*>(d)));
    case ValueType::I32: return Value::i32(at(static_cast<const int32_t*>(d)));
    case ValueType::F32: return Value::f32(at(static_cast<const float*>(d)));
    case ValueType::U64: return Value::u64(at(static_cast<const uint64_t*>(d)));
    case ValueType::I64: return Value::i64(at(static_cast<const int64_t*>(d)));
    case ValueType::F64: return Value::f64(at(static_cast<const double*>(d)));
    case ValueType::BOOL: return Value::boolean(at(static_cast<const int8_t*>(d)) != 0);
    case ValueType::STRING: return Value::string(G().get_arr_str(c, k, i));
    case ValueType::ARRAY: break;
  }
  ADD_FAILURE() << "ggml reported a nested array";
  return Value::u8(0);
}

Value ggml_value(const test::gguf_context* c, int64_t k) {
  auto t = static_cast<ValueType>(G().get_kv_type(c, k));
  switch (t) {
    case ValueType::U8: return Value::u8(G().get_val_u8(c, k));
    case ValueType::I8: return Value::i8(G().get_val_i8(c, k));
    case ValueType::U16: return Value::u16(G().get_val_u16(c, k));
    case ValueType::I16: return Value::i16(G().get_val_i16(c, k));
    case ValueType::U32: return Value::u32(G().get_val_u32(c, k));
    case ValueType::I32: return Value::i32(G().get_val_i32(c, k));
    case ValueType::F32: return Value::f32(G().get_val_f32(c, k));
    case ValueType::U64: return Value::u64(G().get_val_u64(c, k));
    case ValueType::I64: return Value::i64(G().get_val_i64(c, k));
    case ValueType::F64: return Value::f64(G().get_val_f64(c, k));
    case ValueType::BOOL: return Value::boolean(G().get_val_bool(c, k));
    case ValueType::STRING: return Value::string(G().get_val_str(c, k));
    case ValueType::ARRAY: {
      auto et = static_cast<ValueType>(G().get_arr_type(c, k));
      std::vector<Value> items;
      for (size_t i = 0; i < G().get_arr_n(c, k); ++i) items.push_back(ggml_array_item(c, k, et, i));
      return Value::array(et, std::move(items));
    }
  }
  ADD_FAILURE() << "ggml reported value type " << static_cast<int>(t);
  return Value::u8(0);
}

// Everything ggml reports about `path` equals what our reader reports.
void expect_same_as_ggml(const std::string& path) {
  GgmlFile g(path);
  ASSERT_NE(g.ctx, nullptr) << "ggml rejected " << path;
  File f = File::open(path);
  EXPECT_EQ(G().get_version(g.ctx), f.version());
  EXPECT_EQ(G().get_alignment(g.ctx), f.alignment());
  EXPECT_EQ(G().get_data_offset(g.ctx), f.data_offset());
  ASSERT_EQ(G().get_n_kv(g.ctx), static_cast<int64_t>(f.metadata().size()));
  for (int64_t k = 0; k < G().get_n_kv(g.ctx); ++k) {
    const auto& ours = f.metadata()[k];
    EXPECT_EQ(std::string(G().get_key(g.ctx, k)), ours.key);
    EXPECT_TRUE(ggml_value(g.ctx, k) == ours.value) << "key " << ours.key;
  }
  ASSERT_EQ(G().get_n_tensors(g.ctx), static_cast<int64_t>(f.tensors().size()));
  for (int64_t i = 0; i < G().get_n_tensors(g.ctx); ++i) {
    const auto& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(std::string(G().get_tensor_name(g.ctx, i)), t.name);
    EXPECT_EQ(G().get_tensor_type(g.ctx, i), static_cast<int>(t.type));
    EXPECT_EQ(G().get_tensor_offset(g.ctx, i), t.offset);
    EXPECT_EQ(G().get_tensor_size(g.ctx, i), t.n_bytes);
    const int64_t* ne = G().get_tensor_ne(g.ctx, i);
    for (size_t d = 0; d < 4; ++d)
      EXPECT_EQ(static_cast<uint64_t>(ne[d]), d < t.ne.size() ? t.ne[d] : 1) << "dim " << d;
  }
}

struct Declared {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> bytes;
};

// One tensor of every type DwarfStar knows, with a distinct byte pattern each.
std::vector<Declared> all_type_tensors() {
  std::vector<Declared> out;
  const std::pair<GgmlType, std::vector<uint64_t>> shapes[] = {
      {GgmlType::F32, {3, 5}},       {GgmlType::F16, {7}},          {GgmlType::Q8_0, {64, 2}},
      {GgmlType::Q2_K, {256, 1, 2}}, {GgmlType::Q4_K, {512}},       {GgmlType::Q8_K, {256}},
      {GgmlType::IQ2_XXS, {256, 3}}, {GgmlType::I32, {6, 4, 1, 2}}, {GgmlType::BF16, {2, 2, 2, 2}},
  };
  uint8_t seed = 1;
  for (const auto& [type, ne] : shapes) {
    const auto& tr = traits(type);
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<uint8_t> bytes(n / tr.block_elems * tr.block_bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7);
    out.push_back({std::string("t.") + std::string(tr.name), type, ne, std::move(bytes)});
    ++seed;
  }
  return out;
}

std::vector<KeyValue> all_scalar_and_flat_array_kvs() {
  return {
      {"k.u8", Value::u8(255)},
      {"k.i8", Value::i8(-128)},
      {"k.u16", Value::u16(65535)},
      {"k.i16", Value::i16(-32768)},
      {"k.u32", Value::u32(4000000000u)},
      {"k.i32", Value::i32(-2000000000)},
      {"k.f32", Value::f32(3.25f)},
      {"k.bool", Value::boolean(true)},
      {"k.string", Value::string("deepseek4 ✓")},
      {"k.u64", Value::u64(UINT64_MAX)},
      {"k.i64", Value::i64(INT64_MIN)},
      {"k.f64", Value::f64(-1e300)},
      {"a.u8", Value::array(ValueType::U8, {Value::u8(0), Value::u8(9)})},
      {"a.i8", Value::array(ValueType::I8, {Value::i8(-1)})},
      {"a.u16", Value::array(ValueType::U16, {Value::u16(1), Value::u16(2), Value::u16(3)})},
      {"a.i16", Value::array(ValueType::I16, {Value::i16(-5)})},
      {"a.u32", Value::array(ValueType::U32, {Value::u32(7), Value::u32(8)})},
      {"a.i32", Value::array(ValueType::I32, {Value::i32(0), Value::i32(4), Value::i32(128)})},
      {"a.f32", Value::array(ValueType::F32, {Value::f32(10.0f), Value::f32(-0.0f)})},
      {"a.bool", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)})},
      {"a.string", Value::string_array({"a b", "", "Ġc"})},
      {"a.u64", Value::array(ValueType::U64, {Value::u64(1ull << 40)})},
      {"a.i64", Value::array(ValueType::I64, {Value::i64(-(1ll << 40))})},
      {"a.f64", Value::array(ValueType::F64, {Value::f64(0.1)})},
      {"a.empty", Value::array(ValueType::I32, {})},
  };
}

class GgufOurWriterGgmlReader : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufOurWriterGgmlReader, EveryKeyValueTensorAndByteAgrees) {
  const uint32_t alignment = GetParam();
  test::TempDir dir;
  std::string path = dir.file("ours.gguf");
  auto kvs = all_scalar_and_flat_array_kvs();
  if (alignment != 32) kvs.insert(kvs.begin(), {"general.alignment", Value::u32(alignment)});
  auto tensors = all_type_tensors();
  {
    Writer w(path);
    for (const auto& kv : kvs) w.add_kv(kv.key, kv.value);
    for (const auto& t : tensors) w.add_tensor(t.name, t.type, t.ne);
    w.write_header();
    for (const auto& t : tensors) {
      // Stream in uneven pieces to exercise partial writes.
      std::span<const uint8_t> rest(t.bytes);
      while (!rest.empty()) {
        size_t n = std::min<size_t>(rest.size(), 13);
        w.write_tensor_data(rest.first(n));
        rest = rest.subspan(n);
      }
    }
    w.finish();
  }

  GgmlFile g(path);
  ASSERT_NE(g.ctx, nullptr);
  // What ggml sees equals what we declared (oracle: our inputs, read back by ggml).
  EXPECT_EQ(G().get_alignment(g.ctx), alignment);
  ASSERT_EQ(G().get_n_kv(g.ctx), static_cast<int64_t>(kvs.size()));
  for (size_t k = 0; k < kvs.size(); ++k) {
    EXPECT_EQ(std::string(G().get_key(g.ctx, k)), kvs[k].key);
    EXPECT_TRUE(ggml_value(g.ctx, k) == kvs[k].value) << kvs[k].key;
  }
  auto bytes = test::read_all(path);
  uint64_t data_offset = G().get_data_offset(g.ctx);
  EXPECT_EQ(data_offset % alignment, 0u);
  ASSERT_EQ(G().get_n_tensors(g.ctx), static_cast<int64_t>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(std::string(G().get_tensor_name(g.ctx, i)), t.name);
    EXPECT_EQ(G().get_tensor_type(g.ctx, i), static_cast<int>(t.type));
    EXPECT_EQ(G().get_tensor_size(g.ctx, i), t.bytes.size());
    const int64_t* ne = G().get_tensor_ne(g.ctx, i);
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(static_cast<uint64_t>(ne[d]), d < t.ne.size() ? t.ne[d] : 1);
    uint64_t at = data_offset + G().get_tensor_offset(g.ctx, i);
    ASSERT_LE(at + t.bytes.size(), bytes.size());
    EXPECT_EQ(std::memcmp(bytes.data() + at, t.bytes.data(), t.bytes.size()), 0);
  }
  // And our reader agrees with ggml on the same file.
  expect_same_as_ggml(path);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufOurWriterGgmlReader, ::testing::Values(32u, 64u, 1u, 4096u));

TEST(GgufGgmlWriterOurReader, FileWrittenByGgmlReadsIdentically) {
  test::TempDir dir;
  std::string path = dir.file("ggml.gguf");
  auto tensors = all_type_tensors();
  const auto& g = G();
  auto* ctx = g.init_empty();
  auto* mem = g.ggml_init(test::ggml_init_params{1 << 20, nullptr, true});
  ASSERT_NE(mem, nullptr);
  g.set_val_u8(ctx, "k.u8", 7);
  g.set_val_i8(ctx, "k.i8", -7);
  g.set_val_u16(ctx, "k.u16", 700);
  g.set_val_i16(ctx, "k.i16", -700);
  g.set_val_u32(ctx, "k.u32", 70000);
  g.set_val_i32(ctx, "k.i32", -70000);
  g.set_val_f32(ctx, "k.f32", 0.375f);
  g.set_val_u64(ctx, "k.u64", 1ull << 50);
  g.set_val_i64(ctx, "k.i64", -(1ll << 50));
  g.set_val_f64(ctx, "k.f64", 2.5e-10);
  g.set_val_bool(ctx, "k.bool", false);
  g.set_val_str(ctx, "k.str", "joyai-llm");
  const int32_t ints[] = {0, 0, 4, 128};
  g.set_arr_data(ctx, "a.i32", static_cast<int>(ValueType::I32), ints, 4);
  const char* strs[] = {"<｜begin▁of▁sentence｜>", "Ġa", "b"};
  g.set_arr_str(ctx, "a.str", strs, 3);
  for (const auto& t : tensors) {
    int64_t ne[4];
    for (size_t d = 0; d < t.ne.size(); ++d) ne[d] = static_cast<int64_t>(t.ne[d]);
    auto* gt = g.ggml_new_tensor(mem, static_cast<int>(t.type), static_cast<int>(t.ne.size()), ne);
    g.ggml_set_name(gt, t.name.c_str());
    g.add_tensor(ctx, gt);
    g.set_tensor_data(ctx, t.name.c_str(), t.bytes.data());
  }
  ASSERT_TRUE(g.write_to_file(ctx, path.c_str(), false));
  g.free(ctx);
  g.ggml_free(mem);

  expect_same_as_ggml(path);
  File f = File::open(path);
  EXPECT_EQ(f.get_string("k.str"), "joyai-llm");
  EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<int64_t>{0, 0, 4, 128}));
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = f.tensors()[i];
    ASSERT_EQ(t.n_bytes, tensors[i].bytes.size());
    EXPECT_EQ(std::memcmp(t.data, tensors[i].bytes.data(), t.n_bytes), 0) << t.name;
  }
}

TEST(GgufCommittedFixture, ReadsIdenticallyThroughGgml) {
  expect_same_as_ggml(std::string(DS4_FIXTURES_DIR) + "/gguf/tiny.gguf");
}

}  // namespace
}  // namespace ds4::gguf
