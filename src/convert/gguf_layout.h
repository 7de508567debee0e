#pragma once
// The deepseek4 GGUF tensor table (spec §3) for any ModelShape, and the tensor types each
// conversion recipe gives them. Shared by `convert-hf` and `synth`, so both write the same layout.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convert/hf_config.h"
#include "quant/types.h"

namespace ds4::convert {

// f32: every float tensor F32. f16: matrices F16, vectors F32.
// q8_0: the published Flash table (spec §3.1/3.2) with the routed experts in Q8_0 as well.
// flash-q2: the published q2 file: experts gate/up IQ2_XXS, down Q2_K. flash-q4: Q4_K experts.
// mxfp4-moe: the q8_0 table with the routed experts in MXFP4, repacked bit for bit from the
// official release's FP4 experts (no requantization; other sources are refused).
enum class Recipe { F32, F16, Q8_0, FlashQ2, FlashQ4, Mxfp4Moe };
std::optional<Recipe> recipe_from_name(std::string_view name);
std::string_view recipe_name(Recipe r);

// What a tensor is, which decides its type under each recipe.
enum class Role {
  TokenEmbd,       // [hidden, vocab]
  Output,          // [hidden, vocab]
  HcFn,            // hyper-connection mixing matrices (also output_hc_fn)
  AttnMatrix,      // q_a, q_b, kv, output_a, output_b
  AuxMatrix,       // compressor / indexer projections, router
  Ape,             // compressor position bias [width, ratio] (added, never multiplied)
  Vector,          // norms, HC base/scale, sinks, selection bias: always F32
  ExpertGateUp,    // [hidden, ffn, experts]
  ExpertDown,      // [ffn, hidden, experts]
  SharedExpert,    // [hidden, ffn] / [ffn, hidden]
  Tid2eid,         // [experts_used, vocab] I32
};

struct TensorPlan {
  std::string name;            // GGUF name
  std::vector<uint64_t> ne;    // GGUF dims, ne[0] contiguous
  GgmlType type = GgmlType::F32;
  Role role = Role::Vector;
  int layer = -1;              // -1 for global tensors
  std::string note;            // set when the recipe's type had to fall back (row length)
};

// Full table in file order: globals, then blk.0 ... blk.{n-1}. Throws when the recipe cannot
// be honoured (e.g. K-quant experts whose rows are not a multiple of 256).
std::vector<TensorPlan> plan_tensors(const ModelShape& s, Recipe r);

}  // namespace ds4::convert
