// Metadata value constructors, names and comparison.
#include <bit>
#include <cstring>

#include "core/error.h"
#include "gguf/format.h"
#include "gguf/gguf.h"

namespace ds4::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "invalid";
}

std::string describe_type(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  const auto* a = std::get_if<Array>(&v.v);
  return fmt::format("array[{}]", value_type_name(a ? a->elem_type : ValueType::U8));
}

namespace {
Value make(ValueType t, decltype(Value::v) v) {
  Value out;
  out.type = t;
  out.v = std::move(v);
  return out;
}
}  // namespace

Value Value::u8(uint8_t x) { return make(ValueType::U8, uint64_t{x}); }
Value Value::i8(int8_t x) { return make(ValueType::I8, int64_t{x}); }
Value Value::u16(uint16_t x) { return make(ValueType::U16, uint64_t{x}); }
Value Value::i16(int16_t x) { return make(ValueType::I16, int64_t{x}); }
Value Value::u32(uint32_t x) { return make(ValueType::U32, uint64_t{x}); }
Value Value::i32(int32_t x) { return make(ValueType::I32, int64_t{x}); }
Value Value::u64(uint64_t x) { return make(ValueType::U64, x); }
Value Value::i64(int64_t x) { return make(ValueType::I64, x); }
Value Value::f32(float x) { return make(ValueType::F32, double{x}); }
Value Value::f64(double x) { return make(ValueType::F64, x); }
Value Value::boolean(bool x) { return make(ValueType::BOOL, x); }
Value Value::string(std::string s) { return make(ValueType::STRING, std::move(s)); }

Value Value::array(ValueType elem_type, std::vector<Value> items) {
  if (!detail::valid_value_type(static_cast<uint32_t>(elem_type)))
    fail("gguf array: invalid element type {}", static_cast<uint32_t>(elem_type));
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].type != elem_type)
      fail("gguf array of {}: item {} is {}", value_type_name(elem_type), i, describe_type(items[i]));
  return make(ValueType::ARRAY, Array{elem_type, std::move(items)});
}

Value Value::string_array(const std::vector<std::string>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(Value::string(s));
  return make(ValueType::ARRAY, Array{ValueType::STRING, std::move(v)});
}

bool operator==(const Value& a, const Value& b) {
  if (a.type != b.type || a.v.index() != b.v.index()) return false;
  if (const auto* da = std::get_if<double>(&a.v))
    return std::bit_cast<uint64_t>(*da) == std::bit_cast<uint64_t>(std::get<double>(b.v));
  if (const auto* aa = std::get_if<Array>(&a.v)) {
    const auto& ab = std::get<Array>(b.v);
    return aa->elem_type == ab.elem_type && aa->items == ab.items;
  }
  if (const auto* sa = std::get_if<std::string>(&a.v)) return *sa == std::get<std::string>(b.v);
  if (const auto* ua = std::get_if<uint64_t>(&a.v)) return *ua == std::get<uint64_t>(b.v);
  if (const auto* ia = std::get_if<int64_t>(&a.v)) return *ia == std::get<int64_t>(b.v);
  return std::get<bool>(a.v) == std::get<bool>(b.v);
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;  // the reader and writer reject shapes whose product overflows
  return n;
}

}  // namespace ds4::gguf
