#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace ds4::tokenizer {

ByteLevel::ByteLevel() {
  cp_to_byte.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? b : next_extra++;
    byte_to_cp[b] = cp;
    utf8_append(byte_to_utf8[b], cp);
    cp_to_byte[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevel& ByteLevel::get() {
  static const ByteLevel instance;
  return instance;
}

}  // namespace ds4::tokenizer
