#pragma once
// Constants and small helpers of the GGUF v3 encoding shared by the reader and the writer.
// Internal to ds4_gguf.
#include <bit>
#include <cstdint>
#include <optional>

#include "gguf/gguf.h"

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; the reader copies fields as host integers");

namespace ds4::gguf::detail {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr const char* kAlignmentKey = "general.alignment";

// Smallest possible encodings, used to bound counts against the bytes left before allocating.
inline constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length (empty key: rejected later), type, u8 value
inline constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, ne0, type, offset

inline bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

// Encoded size of a fixed-size scalar; nullopt for STRING and ARRAY.
inline std::optional<uint64_t> scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return std::nullopt;
  }
  return std::nullopt;
}

// Smallest encoding of one array element of type t (a string is at least its u64 length,
// an inner array at least its u32 type and u64 count).
inline uint64_t min_element_size(ValueType t) {
  if (auto s = scalar_size(t)) return *s;
  return t == ValueType::STRING ? 8 : 12;
}

inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// a must be a power of two. nullopt on overflow.
inline std::optional<uint64_t> align_up(uint64_t x, uint64_t a) {
  uint64_t r = x + (a - 1);
  if (r < x) return std::nullopt;
  return r & ~(a - 1);
}

}  // namespace ds4::gguf::detail
