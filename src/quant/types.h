#pragma once
// ggml tensor type ids as stored in GGUF files, with their block geometry.
// Only the types DwarfStar reads or writes are "known"; any other id is rejected by the loader.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ds4 {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
  Q2_K = 10,
  Q4_K = 12,
  Q8_K = 15,
  IQ2_XXS = 16,
  I32 = 26,
  BF16 = 30,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;   // as ggml spells it: "f32", "q8_0", "iq2_xxs", ...
  uint32_t block_elems;    // weights per block
  uint32_t block_bytes;    // bytes per block
};

// nullopt for ids DwarfStar does not handle.
std::optional<TypeTraits> type_traits(uint32_t type_id);
const TypeTraits& traits(GgmlType t);
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of one row of n elements; n must be a multiple of block_elems (callers validate).
inline size_t row_bytes(const TypeTraits& t, uint64_t n) { return n / t.block_elems * t.block_bytes; }

}  // namespace ds4
