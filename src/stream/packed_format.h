#pragma once
// The packed expert file (docs/FORMATS.md, "Packed expert file"): every routed expert of a
// GGUF as one contiguous record (gate | up | down, each component aligned), layer-major,
// behind a checksummed manifest. Bytes are copied from the GGUF unchanged.
//
// Also the marker that `ds4-gguf pack-experts` writes at the start of every expert tensor it
// frees inside the GGUF: a freed GGUF opened without its packed file is detected, never run.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stream/layout.h"

namespace ds4::gguf {
class File;
}

namespace ds4::stream {

inline constexpr char kPackedMagic[8] = {'D', 'S', '4', 'X', 'P', 'A', 'C', 'K'};
inline constexpr uint32_t kPackedVersion = 1;
inline constexpr uint32_t kPackedAlignment = 4096;  // O_DIRECT-friendly on every Linux file system
inline constexpr size_t kHeaderBytes = 64;

struct PackedLayer {
  LayerShape shape;
  std::array<uint64_t, 3> comp_offset{};  // inside a record, each a multiple of the alignment
  std::array<uint64_t, 3> tensor_hash{};  // XXH64 of the whole GGUF tensor (restore check)
  uint64_t record_stride = 0;             // bytes between records (a multiple of the alignment)
  uint64_t offset = 0;                    // absolute file offset of expert 0's record
};

struct PackedManifest {
  uint32_t alignment = kPackedAlignment;
  uint64_t gguf_meta_hash = 0;  // identity of the GGUF (gguf_meta_hash below)
  uint64_t gguf_file_hash = 0;  // XXH64 of the whole original GGUF (restore check)
  uint64_t gguf_file_size = 0;
  int64_t n_expert = 0;
  std::vector<PackedLayer> layers;
  std::vector<uint64_t> record_hash;  // [layer][expert]: XXH64 of the record's payload bytes
  uint64_t payload_offset = 0;
  uint64_t file_size = 0;
  uint64_t manifest_hash = 0;  // XXH64 of the encoded manifest (set by encode / read)

  uint64_t record_offset(int64_t layer, int64_t e) const {
    const PackedLayer& l = layers[static_cast<size_t>(layer)];
    return l.offset + static_cast<uint64_t>(e) * l.record_stride;
  }
  // XXH64 over the payload bytes of one record (components only, no padding).
  static uint64_t hash_record(const LayerShape& s, const uint8_t* gate, const uint8_t* up, const uint8_t* down);
};

// Offsets for a layout (hashes left zero).
PackedManifest plan_packed(const ExpertLayout& layout, uint32_t alignment = kPackedAlignment);
// Header + manifest + padding up to payload_offset; sets m.manifest_hash.
std::vector<uint8_t> encode_packed_prefix(PackedManifest& m);
// Reads and validates header and manifest of an open file; throws ds4::Error naming `path`.
PackedManifest read_packed_manifest(int fd, const std::string& path);
// The manifest must describe exactly this GGUF's experts (meta hash and every shape).
void check_packed_matches(const PackedManifest& m, const ExpertLayout& layout, uint64_t gguf_meta_hash,
                          const std::string& packed_path, const std::string& gguf_path);

// Identity of a GGUF: XXH64 of the bytes before its data section and of the first and last
// 4 KiB of every tensor except the routed experts (which may be freed).
uint64_t gguf_meta_hash(const gguf::File& f);

// Freed-tensor marker (32 bytes at the start of a freed expert tensor's data).
inline constexpr size_t kMarkerBytes = 32;
std::array<uint8_t, kMarkerBytes> make_freed_marker(uint64_t manifest_hash, uint64_t tensor_hash);
bool is_freed_marker(std::span<const uint8_t> bytes, uint64_t* manifest_hash = nullptr);
// Number of expert tensors (of 3 * n_layer) that begin with a freed marker.
int count_freed_tensors(const gguf::File& f, const ExpertLayout& layout);

// Where the engine looks for the packed file of a model: "<model path>.experts".
std::string default_packed_path(const std::string& gguf_path);

}  // namespace ds4::stream
