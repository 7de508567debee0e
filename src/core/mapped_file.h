#pragma once
// Read-only memory map of a whole file. Model weights are used in place from this mapping.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ds4 {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws ds4::Error naming the path and the system error.
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ds4
