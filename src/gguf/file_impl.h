#pragma once
// State behind ds4::gguf::File, shared by the parser (parse.cpp) and the accessors (file.cpp).
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"
#include "gguf/gguf.h"

namespace ds4::gguf {

struct File::Impl {
  std::string path;                 // as given, used in every error message
  MappedFile mapping;               // empty for File::parse()
  std::span<const uint8_t> bytes;   // whole file image
  uint32_t version = 0;
  uint32_t alignment = 0;
  uint64_t data_offset = 0;
  std::vector<KeyValue> metadata;
  std::vector<uint64_t> kv_offsets;  // file offset of each key, for error messages
  std::vector<TensorInfo> tensors;
  // Built after the vectors above are final; the views point into their strings.
  std::unordered_map<std::string_view, size_t> key_index;
  std::unordered_map<std::string_view, size_t> tensor_index;
};

namespace detail {
// Validates `impl.bytes` and fills every other field. Throws ds4::Error naming impl.path.
void parse_into(File::Impl& impl);
}  // namespace detail

}  // namespace ds4::gguf
