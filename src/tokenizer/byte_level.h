#pragma once
// GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE runs over
// text. Bytes 33-126, 161-172 and 174-255 map to themselves; the other 68 bytes map to
// U+0100, U+0101, ... in increasing byte order (spec section 9.1).
#include <array>
#include <cstdint>
#include <string>

namespace ds4::tokenizer {

struct ByteLevel {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8{};  // byte_to_cp encoded, for building token text

  // Inverse map for code points < 512 (all images lie below U+0144); -1 = not in the alphabet.
  std::array<int16_t, 512> cp_to_byte{};

  ByteLevel();
  static const ByteLevel& get();

  int byte_of(uint32_t cp) const { return cp < cp_to_byte.size() ? cp_to_byte[cp] : -1; }
};

}  // namespace ds4::tokenizer
