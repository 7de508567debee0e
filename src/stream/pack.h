#pragma once
// `ds4-gguf pack-experts`: copy every routed expert of a GGUF into a packed expert file
// (packed_format.h), verify every byte, and by default free the expert ranges inside the GGUF
// (hole punching) so nothing is stored twice; or put the GGUF back byte-identical.
#include <cstdint>
#include <functional>
#include <string>

namespace ds4::stream {

struct PackReport {
  uint64_t experts = 0;
  uint64_t payload_bytes = 0;      // expert bytes copied
  uint64_t packed_file_bytes = 0;
  uint64_t gguf_blocks_before = 0, gguf_blocks_after = 0;  // allocated bytes on disk (st_blocks * 512)
  bool freed = false;
};

using Progress = std::function<void(const std::string& what, uint64_t done, uint64_t total)>;

// Writes `packed_path` (via "<packed_path>.tmp" + rename), re-reads it and compares every
// record with the GGUF, then (unless keep_gguf_experts) punches the expert tensors out of the
// GGUF, leaving a marker at the start of each. Throws ds4::Error naming file and step; the GGUF
// is untouched unless every record verified.
PackReport pack_experts(const std::string& gguf_path, const std::string& packed_path, bool keep_gguf_experts,
                        const Progress& progress = {});

// Writes the packed records back into the GGUF's expert tensors and checks the whole file's
// XXH64 and size against the values recorded at pack time. The packed file is kept.
PackReport restore_experts(const std::string& gguf_path, const std::string& packed_path,
                           const Progress& progress = {});

}  // namespace ds4::stream
