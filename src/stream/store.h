#pragma once
// Where each expert's bytes live: the GGUF's three expert tensors, or a packed expert file
// (packed_format.h). The store only describes reads; io.h performs them.
//
// Reads are widened to the direct-I/O block (4 KiB) on both ends so the O_DIRECT descriptor
// can serve them; a component then starts `lead` bytes into its read buffer. In the packed
// file every component is aligned, so lead is 0 and a record can be one read.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "stream/layout.h"
#include "stream/packed_format.h"

namespace ds4::gguf {
class File;
}

namespace ds4::stream {

inline constexpr uint64_t kDirectAlign = 4096;

struct ComponentRead {
  uint64_t offset = 0;  // aligned file offset
  uint32_t len = 0;     // aligned length (may extend past end of file: reads stop there)
  uint32_t lead = 0;    // the component starts this many bytes into the read
  uint64_t need = 0;    // lead + component bytes: a read shorter than this is an error
};

struct StoreOptions {
  // Packed expert file: "" = default_packed_path(model) if that file exists; "-" = never.
  std::string packed_path;
  bool direct_io = true;      // O_DIRECT when the file system allows it
  bool verify_reads = false;  // packed file: check every record's XXH64 after reading it
};

class ExpertStore {
 public:
  // Opens the expert source for an opened GGUF. Throws ds4::Error when the GGUF's experts were
  // freed by `ds4-gguf pack-experts` and no matching packed file is found, or when a packed
  // file does not belong to this GGUF.
  static std::unique_ptr<ExpertStore> open(const gguf::File& f, const StoreOptions& opt);
  ~ExpertStore();

  const ExpertLayout& layout() const { return layout_; }
  bool packed() const { return packed_.has_value(); }
  const std::string& source_path() const { return source_path_; }
  bool direct() const { return direct_; }
  int fd() const { return direct_ ? fd_direct_ : fd_buffered_; }

  // Read of one component of (layer, e), and the whole record (packed file only).
  ComponentRead component(int64_t layer, int64_t e, int c) const;
  ComponentRead record(int64_t layer, int64_t e) const;
  // Offset of each component inside a record read (packed file).
  uint64_t record_comp_offset(int64_t layer, int c) const;
  // Bytes a slot needs to hold (layer, *) read component by component / as one record.
  uint64_t slot_bytes_split(int64_t layer) const;
  uint64_t slot_bytes_record(int64_t layer) const;
  // Packed file: whether the record bytes hash to the manifest's value. GGUF: always true.
  bool verify(int64_t layer, int64_t e, const uint8_t* gate, const uint8_t* up, const uint8_t* down) const;

 private:
  ExpertStore() = default;
  ExpertLayout layout_;
  std::optional<PackedManifest> packed_;
  std::string source_path_;
  int fd_direct_ = -1, fd_buffered_ = -1;
  bool direct_ = false;
};

}  // namespace ds4::stream
