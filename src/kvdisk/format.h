#pragma once
// Disk KV cache file format (docs/FORMATS.md "Disk KV cache file"), all little-endian:
//
//   offset size
//   0      8    magic "DS4KVDSK"
//   8      4    u32 version (1)
//   12     4    u32 header bytes (128)
//   16     16   model id: EngineInfo::model_id, 16 ASCII hex digits
//   32     20   SHA-1 of the text section (the cache key; the file is <hex>.kv)
//   52     4    u32 save reason (1 cold, 2 continued, 3 evict, 4 shutdown)
//   56     8    u64 n_tokens: tokens the state covers
//   64     8    u64 n_ctx of the saving session
//   72     8    i64 created, unix seconds
//   80     8    i64 last used, unix seconds   (rewritten in place on every hit)
//   88     8    u64 hit count                  (rewritten in place on every hit)
//   96     8    u64 text bytes
//   104    8    u64 payload bytes
//   112    8    u64 tool-map bytes (0: no section)
//   120    8    u64 XXH64 (seed 0) of bytes 0..119
//   128         text: the rendered bytes of the n_tokens tokens (the decoded token pieces)
//               session payload (docs/FORMATS.md "Session payload")
//               tool map: u64 XXH64 (seed 0) of the rest of the section, u32 entries; per
//                         entry u32 n_ids, n_ids x (u32 len, bytes), u32 block len, block
//                         bytes (a sampled DSML block and its call ids). Its own checksum lets
//                         a server read every file's map at startup without the payloads.
//   end-8  8    u64 XXH64 (seed 0) of the text, payload and tool-map bytes
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvdisk/sha1.h"

namespace ds4::kvdisk {

enum class SaveReason : uint32_t { Cold = 1, Continued = 2, Evict = 3, Shutdown = 4 };
const char* to_string(SaveReason r);

constexpr size_t kHeaderBytes = 128;
constexpr size_t kTrailerBytes = 8;

struct Header {
  std::string model_id;  // 16 hex digits
  Digest key{};
  SaveReason reason = SaveReason::Cold;
  uint64_t n_tokens = 0;
  uint64_t n_ctx = 0;
  int64_t created = 0;
  int64_t last_used = 0;
  uint64_t hits = 0;
  uint64_t text_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t tools_bytes = 0;

  uint64_t file_bytes() const { return kHeaderBytes + text_bytes + payload_bytes + tools_bytes + kTrailerBytes; }
};

std::vector<uint8_t> encode_header(const Header& h);
// Validates magic, version, header size, checksum, reason and that the section sizes add up
// without overflow. Throws ds4::Error naming `where` and the failed check.
Header decode_header(std::span<const uint8_t> bytes, const std::string& where);

struct ToolEntry {
  std::vector<std::string> ids;
  std::string block;
};
std::vector<uint8_t> encode_tools(const std::vector<ToolEntry>& entries);
std::vector<ToolEntry> decode_tools(std::span<const uint8_t> bytes, const std::string& where);

// A whole file: header (key = SHA-1 of text), sections, trailer.
std::vector<uint8_t> encode_file(Header h, std::string_view text, std::span<const uint8_t> payload,
                                 const std::vector<ToolEntry>& tools);

struct Decoded {
  Header header;
  std::string text;
  std::vector<uint8_t> payload;
  std::vector<ToolEntry> tools;
};
// Checks everything decode_header does, then the exact length, the trailer checksum and that
// the key is the SHA-1 of the text.
Decoded decode_file(std::span<const uint8_t> bytes, const std::string& where);

}  // namespace ds4::kvdisk
