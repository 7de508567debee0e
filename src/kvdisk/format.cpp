#include "kvdisk/format.h"

#include <xxhash.h>

#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace ds4::kvdisk {

static_assert(std::endian::native == std::endian::little, "disk KV cache files are written in host order");

namespace {

constexpr char kMagic[8] = {'D', 'S', '4', 'K', 'V', 'D', 'S', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kChecksumAt = 120;

template <class T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <class T>
T get(std::span<const uint8_t> b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

void append_u32(std::vector<uint8_t>& b, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + 4);
}
void append_str(std::vector<uint8_t>& b, std::string_view s) {
  if (s.size() > std::numeric_limits<uint32_t>::max()) fail("kv cache: tool-map string of {} bytes is too long", s.size());
  append_u32(b, static_cast<uint32_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

bool is_hex16(std::string_view s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

const char* to_string(SaveReason r) {
  switch (r) {
    case SaveReason::Cold: return "cold";
    case SaveReason::Continued: return "continued";
    case SaveReason::Evict: return "evict";
    case SaveReason::Shutdown: return "shutdown";
  }
  return "?";
}

std::vector<uint8_t> encode_header(const Header& h) {
  if (!is_hex16(h.model_id)) fail("kv cache: model id '{}' is not 16 lowercase hex digits", h.model_id);
  std::vector<uint8_t> b(kHeaderBytes, 0);
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b, 8, kVersion);
  put<uint32_t>(b, 12, static_cast<uint32_t>(kHeaderBytes));
  std::memcpy(b.data() + 16, h.model_id.data(), 16);
  std::memcpy(b.data() + 32, h.key.data(), 20);
  put<uint32_t>(b, 52, static_cast<uint32_t>(h.reason));
  put<uint64_t>(b, 56, h.n_tokens);
  put<uint64_t>(b, 64, h.n_ctx);
  put<int64_t>(b, 72, h.created);
  put<int64_t>(b, 80, h.last_used);
  put<uint64_t>(b, 88, h.hits);
  put<uint64_t>(b, 96, h.text_bytes);
  put<uint64_t>(b, 104, h.payload_bytes);
  put<uint64_t>(b, 112, h.tools_bytes);
  put<uint64_t>(b, kChecksumAt, XXH64(b.data(), kChecksumAt, 0));
  return b;
}

Header decode_header(std::span<const uint8_t> b, const std::string& where) {
  if (b.size() < kHeaderBytes) fail("{}: truncated: {} bytes, a header needs {}", where, b.size(), kHeaderBytes);
  if (std::memcmp(b.data(), kMagic, 8) != 0) fail("{}: not a disk KV cache file (bad magic)", where);
  const uint32_t version = get<uint32_t>(b, 8);
  if (version != kVersion) fail("{}: version {} (this build reads version {})", where, version, kVersion);
  const uint32_t hb = get<uint32_t>(b, 12);
  if (hb != kHeaderBytes) fail("{}: header size {} (expected {})", where, hb, kHeaderBytes);
  const uint64_t sum = get<uint64_t>(b, kChecksumAt);
  if (sum != XXH64(b.data(), kChecksumAt, 0)) fail("{}: header checksum mismatch (corrupt header)", where);
  Header h;
  h.model_id.assign(reinterpret_cast<const char*>(b.data() + 16), 16);
  if (!is_hex16(h.model_id)) fail("{}: model id field is not 16 hex digits", where);
  std::memcpy(h.key.data(), b.data() + 32, 20);
  const uint32_t reason = get<uint32_t>(b, 52);
  if (reason < 1 || reason > 4) fail("{}: save reason {} is not 1..4", where, reason);
  h.reason = static_cast<SaveReason>(reason);
  h.n_tokens = get<uint64_t>(b, 56);
  h.n_ctx = get<uint64_t>(b, 64);
  h.created = get<int64_t>(b, 72);
  h.last_used = get<int64_t>(b, 80);
  h.hits = get<uint64_t>(b, 88);
  h.text_bytes = get<uint64_t>(b, 96);
  h.payload_bytes = get<uint64_t>(b, 104);
  h.tools_bytes = get<uint64_t>(b, 112);
  constexpr uint64_t kMax = uint64_t{1} << 48;  // 256 TiB: anything larger is garbage
  if (h.text_bytes > kMax || h.payload_bytes > kMax || h.tools_bytes > kMax)
    fail("{}: section sizes {} / {} / {} are implausible", where, h.text_bytes, h.payload_bytes, h.tools_bytes);
  if (h.n_tokens > h.n_ctx) fail("{}: {} tokens exceed the saved context of {}", where, h.n_tokens, h.n_ctx);
  if (h.n_tokens > 0 && h.text_bytes == 0) fail("{}: {} tokens but no text", where, h.n_tokens);
  return h;
}

std::vector<uint8_t> encode_tools(const std::vector<ToolEntry>& entries) {
  std::vector<uint8_t> b;
  if (entries.empty()) return b;
  b.resize(8);
  append_u32(b, static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    append_u32(b, static_cast<uint32_t>(e.ids.size()));
    for (const auto& id : e.ids) append_str(b, id);
    append_str(b, e.block);
  }
  put<uint64_t>(b, 0, XXH64(b.data() + 8, b.size() - 8, 0));
  return b;
}

std::vector<ToolEntry> decode_tools(std::span<const uint8_t> b, const std::string& where) {
  std::vector<ToolEntry> out;
  if (b.empty()) return out;
  if (b.size() < 12) fail("{}: tool map truncated: {} bytes", where, b.size());
  if (get<uint64_t>(b, 0) != XXH64(b.data() + 8, b.size() - 8, 0)) fail("{}: tool map checksum mismatch", where);
  size_t at = 8;
  auto u32 = [&](const char* what) {
    if (b.size() - at < 4) fail("{}: tool map truncated reading {} at byte {}", where, what, at);
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    at += 4;
    return v;
  };
  auto str = [&](const char* what) {
    uint32_t n = u32(what);
    if (b.size() - at < n) fail("{}: tool map truncated: {} of {} bytes at byte {}", where, what, n, at);
    std::string s(reinterpret_cast<const char*>(b.data() + at), n);
    at += n;
    return s;
  };
  const uint32_t n = u32("the entry count");
  for (uint32_t i = 0; i < n; ++i) {
    ToolEntry e;
    const uint32_t ids = u32("an id count");
    if (ids > b.size()) fail("{}: tool map entry {} claims {} ids", where, i, ids);
    for (uint32_t k = 0; k < ids; ++k) e.ids.push_back(str("an id"));
    e.block = str("a block");
    out.push_back(std::move(e));
  }
  if (at != b.size()) fail("{}: tool map has {} trailing bytes", where, b.size() - at);
  return out;
}

std::vector<uint8_t> encode_file(Header h, std::string_view text, std::span<const uint8_t> payload,
                                 const std::vector<ToolEntry>& tools) {
  const std::vector<uint8_t> tb = encode_tools(tools);
  h.key = Sha1::of(text);
  h.text_bytes = text.size();
  h.payload_bytes = payload.size();
  h.tools_bytes = tb.size();
  std::vector<uint8_t> b = encode_header(h);
  b.reserve(static_cast<size_t>(h.file_bytes()));
  b.insert(b.end(), text.begin(), text.end());
  b.insert(b.end(), payload.begin(), payload.end());
  b.insert(b.end(), tb.begin(), tb.end());
  const uint64_t sum = XXH64(b.data() + kHeaderBytes, b.size() - kHeaderBytes, 0);
  const auto* p = reinterpret_cast<const uint8_t*>(&sum);
  b.insert(b.end(), p, p + 8);
  return b;
}

Decoded decode_file(std::span<const uint8_t> b, const std::string& where) {
  Decoded d;
  d.header = decode_header(b, where);
  const Header& h = d.header;
  if (b.size() != h.file_bytes())
    fail("{}: {} bytes, the header says {} ({})", where, b.size(), h.file_bytes(),
         b.size() < h.file_bytes() ? "truncated" : "trailing bytes");
  const size_t body = b.size() - kHeaderBytes - kTrailerBytes;
  const uint64_t sum = get<uint64_t>(b, b.size() - kTrailerBytes);
  if (sum != XXH64(b.data() + kHeaderBytes, body, 0)) fail("{}: body checksum mismatch (corrupt file)", where);
  size_t at = kHeaderBytes;
  d.text.assign(reinterpret_cast<const char*>(b.data() + at), static_cast<size_t>(h.text_bytes));
  at += static_cast<size_t>(h.text_bytes);
  if (Sha1::of(d.text) != h.key) fail("{}: the key is not the SHA-1 of the text", where);
  d.payload.assign(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + h.payload_bytes));
  at += static_cast<size_t>(h.payload_bytes);
  d.tools = decode_tools(b.subspan(at, static_cast<size_t>(h.tools_bytes)), where);
  return d;
}

}  // namespace ds4::kvdisk
