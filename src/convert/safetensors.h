#pragma once
// Read-only, validating reader for the safetensors format (Hugging Face checkpoints).
//
// Layout: u64 little-endian header length N, N bytes of JSON object
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"k": "v"}}, then the byte buffer the offsets index (relative to its start).
// Everything is checked before a SafetensorsFile exists: the JSON, every dtype and shape, that
// each tensor's byte range matches its shape, lies in the buffer, and that the tensors tile the
// buffer exactly (no overlap, no hole), as the reference implementation requires.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"

namespace ds4::convert {

enum class StDtype { BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0 };

std::string_view st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<uint64_t> shape;      // PyTorch order: shape[0] is the slowest axis
  std::span<const uint8_t> bytes;   // inside the mapping; not necessarily aligned
  std::string file;                 // for error messages

  uint64_t n_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates; throws ds4::Error("<path>: <what>").
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory image that outlives the object (tests, fuzzing).
  static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& name_for_errors);

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse_image(std::span<const uint8_t> bytes);

  MappedFile map_;
  std::string path_;
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Element conversions. Values are read with memcpy (the buffer need not be aligned).
// to_f32 accepts F32, F16, BF16 and F64; to_i64 accepts the integer dtypes. Anything else
// throws naming the tensor.
void to_f32(const StTensor& t, uint64_t first, uint64_t count, float* dst);
std::vector<float> to_f32(const StTensor& t);
std::vector<int64_t> to_i64(const StTensor& t);

}  // namespace ds4::convert
