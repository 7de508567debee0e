// ds4::gguf::File: construction and typed metadata access.
#include <limits>

#include "core/error.h"
#include "gguf/file_impl.h"

namespace ds4::gguf {

File::File() : impl_(std::make_unique<Impl>()) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  File f;
  f.impl_->path = path;
  f.impl_->mapping = MappedFile::open(path);
  f.impl_->bytes = f.impl_->mapping.bytes();
  detail::parse_into(*f.impl_);
  return f;
}

File File::parse(std::span<const uint8_t> bytes, const std::string& name_for_errors) {
  File f;
  f.impl_->path = name_for_errors;
  f.impl_->bytes = bytes;
  detail::parse_into(*f.impl_);
  return f;
}

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint32_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }
const std::vector<KeyValue>& File::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

namespace {

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

// Integer payload as int64; nullopt when it does not fit (u64 above INT64_MAX).
std::optional<int64_t> as_int64(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v.v);
}

double as_double(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<double>(*u);
  return static_cast<double>(std::get<int64_t>(v.v));
}

// Coercion failures name the file, the key's offset, the key, what it holds and what was asked.
[[noreturn]] void key_fail(const File::Impl& f, std::string_view key, const std::string& holds,
                           std::string_view expected) {
  fail("{}: offset {}: key '{}' is {}, expected {}", f.path, f.kv_offsets[f.key_index.find(key)->second], key,
       holds, expected);
}

}  // namespace

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) key_fail(*impl_, key, describe_type(*v), "a string");
  return std::get<std::string>(v->v);
}

std::optional<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type)) key_fail(*impl_, key, describe_type(*v), "an unsigned integer");
  if (const auto* u = std::get_if<uint64_t>(&v->v)) return *u;
  int64_t i = std::get<int64_t>(v->v);
  if (i < 0) key_fail(*impl_, key, fmt::format("{} {}", describe_type(*v), i), "an unsigned integer");
  return static_cast<uint64_t>(i);
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type)) key_fail(*impl_, key, describe_type(*v), "an integer");
  auto i = as_int64(*v);
  if (!i) key_fail(*impl_, key, describe_type(*v), "an integer that fits int64");
  return *i;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type) && !is_float(v->type)) key_fail(*impl_, key, describe_type(*v), "a number");
  return as_double(*v);
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::BOOL) key_fail(*impl_, key, describe_type(*v), "a bool");
  return std::get<bool>(v->v);
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const auto* a = std::get_if<Array>(&v->v);
  if (!a || !is_integer(a->elem_type)) key_fail(*impl_, key, describe_type(*v), "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    auto i = as_int64(item);
    if (!i) key_fail(*impl_, key, describe_type(*v), "an array of integers that fit int64");
    out.push_back(*i);
  }
  return out;
}

std::optional<std::vector<double>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const auto* a = std::get_if<Array>(&v->v);
  if (!a || !(is_integer(a->elem_type) || is_float(a->elem_type))) key_fail(*impl_, key, describe_type(*v), "an array of numbers");
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) out.push_back(as_double(item));
  return out;
}

std::optional<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const auto* a = std::get_if<Array>(&v->v);
  if (!a || a->elem_type != ValueType::STRING) key_fail(*impl_, key, describe_type(*v), "an array of strings");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) out.push_back(std::get<std::string>(item.v));
  return out;
}

}  // namespace ds4::gguf
