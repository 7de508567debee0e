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
  Q4_0 = 2,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I32 = 26,
  IQ1_M = 29,
  BF16 = 30,
  MXFP4 = 39,
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
