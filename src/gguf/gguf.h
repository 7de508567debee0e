#pragma once
// GGUF v3 container: a validating read-only reader over an mmap, and a streaming writer.
// Layout: ../shared/design/deepseek-v4-model.md §2 and docs/FORMATS.md.
//
// The reader validates the whole header, every metadata value and every tensor info before
// the File object exists; any violation throws ds4::Error naming the file, byte offset and
// the problem. After open() succeeds, every tensor's bytes lie inside the mapping.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "quant/types.h"

namespace ds4::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;  // ints widened, floats as double

  // Constructors for each stored type (the writer stores exactly this type).
  static Value u8(uint8_t x);
  static Value i8(int8_t x);
  static Value u16(uint16_t x);
  static Value i16(int16_t x);
  static Value u32(uint32_t x);
  static Value i32(int32_t x);
  static Value u64(uint64_t x);
  static Value i64(int64_t x);
  static Value f32(float x);
  static Value f64(double x);
  static Value boolean(bool x);
  static Value string(std::string s);
  static Value array(ValueType elem_type, std::vector<Value> items);
  static Value string_array(const std::vector<std::string>& items);

  // Structural equality: same stored type, same value (floats compared bit for bit as double,
  // so a NaN equals itself), same array element type and items.
  friend bool operator==(const Value& a, const Value& b);
};

// Human-readable type of a value, e.g. "u32", "string", "array[i32]", "array[array]".
std::string describe_type(const Value& v);

// Bounds the reader enforces so a hostile header cannot make it allocate without limit.
// Each is far above what a real model file needs (DeepSeek V4: ~520k metadata array items,
// ~2 MB of strings, 1-level arrays).
struct Limits {
  static constexpr uint32_t max_array_depth = 8;                    // array of array of ... (levels)
  static constexpr uint64_t max_metadata_items = 1ull << 22;        // array elements in all metadata
  static constexpr uint64_t max_metadata_string_bytes = 256ull << 20;  // keys + string values
  static constexpr size_t max_tensor_name = 63;                     // ggml's GGML_MAX_NAME - 1
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;   // ne[0] fastest; 1..4 dims
  uint64_t offset = 0;        // relative to the data section
  uint64_t n_bytes = 0;       // derived from type and shape
  const uint8_t* data = nullptr;  // reader only: points into the mapping

  uint64_t n_elements() const;
  uint64_t file_offset = 0;   // reader only: absolute offset of the data in the file
};

class File {
 public:
  // Maps and validates. Throws ds4::Error("<path>: offset <n>: <what>").
  static File open(const std::string& path);
  // Validates an in-memory image (used by fuzzing and tests); `bytes` must outlive the File.
  static File parse(std::span<const uint8_t> bytes, const std::string& name_for_errors);

  const std::string& path() const;
  uint32_t version() const;
  uint32_t alignment() const;
  uint64_t data_offset() const;   // absolute file offset of the data section
  uint64_t file_size() const;

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;

  // Typed access with the coercions the published files need. nullopt when the key is
  // absent; ds4::Error when present with a type that cannot be coerced (message names key).
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;   // any unsigned/signed int >= 0
  std::optional<int64_t> get_int(std::string_view key) const;     // any integer type
  std::optional<double> get_float(std::string_view key) const;    // f32, f64, u32, i32 (and other ints)
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;   // i32/u32/... arrays
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;  // f32/f64/int arrays
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  struct Impl;  // opaque; defined inside ds4_gguf

 private:
  File();
  std::unique_ptr<Impl> impl_;
};

// Streaming writer: declare all metadata and tensor infos, then stream tensor data in the
// declared order. Data offsets are aligned to `general.alignment` (default 32; set it with
// add_kv before write_header to change it). The file is written to "<path>.tmp" and renamed
// over <path> by finish(), so a failed conversion never leaves a half file under the name.
// Any error (ds4::Error naming <path>) or destruction before finish() deletes the .tmp file;
// after an error the Writer refuses further calls.
class Writer {
 public:
  explicit Writer(std::string path);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void add_kv(std::string key, Value value);
  // n_bytes is derived from type and shape; the shape must be a whole number of blocks per row.
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne);

  void write_header();                       // metadata + tensor infos + padding
  void write_tensor_data(std::span<const uint8_t> bytes);  // next tensor, in order, whole or in pieces
  // Like write_tensor_data with n zero bytes, but seeks instead of writing, so the bytes
  // become a file hole (sparse file; reads back as zeros). For synthetic test models.
  void skip_tensor_data(uint64_t n);
  void finish();                             // pads, checks every tensor was written, renames

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::gguf
