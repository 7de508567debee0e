#include "quant/types.h"

#include <array>

#include "core/error.h"

namespace ds4 {

namespace {
constexpr std::array<TypeTraits, 9> kTraits{{
    {GgmlType::F32, "f32", 1, 4},
    {GgmlType::F16, "f16", 1, 2},
    {GgmlType::Q8_0, "q8_0", 32, 34},
    {GgmlType::Q2_K, "q2_K", 256, 84},
    {GgmlType::Q4_K, "q4_K", 256, 144},
    {GgmlType::Q8_K, "q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "iq2_xxs", 256, 66},
    {GgmlType::I32, "i32", 1, 4},
    {GgmlType::BF16, "bf16", 1, 2},
}};
}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type_id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  return std::nullopt;
}

const TypeTraits& traits(GgmlType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return t;
  fail("unknown ggml type id {}", static_cast<uint32_t>(type));
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const auto& t : kTraits)
    if (t.name == name) return t.type;
  return std::nullopt;
}

}  // namespace ds4
