#pragma once
// Hand-assembles GGUF images field by field, independently of ds4::gguf::Writer, so tests can
// build exactly the malformed file they need and know the offset of every field.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace ds4::test {

struct GgufBytes {
  std::vector<uint8_t> b;

  uint64_t size() const { return b.size(); }
  template <class T>
  GgufBytes& put(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  GgufBytes& u8(uint8_t x) { return put(x); }
  GgufBytes& u32(uint32_t x) { return put(x); }
  GgufBytes& u64(uint64_t x) { return put(x); }
  GgufBytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  // name, dims, type id, offset
  GgufBytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad(uint64_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  GgufBytes& zeros(uint64_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  std::span<const uint8_t> span() const { return b; }
};

// A fresh, empty directory under the system temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("ds4-gguf-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_all(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace ds4::test
