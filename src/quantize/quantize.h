#pragma once
// GGUF -> GGUF re-quantization under a recipe (ds4-gguf quantize).
//
// Each tensor gets the recipe's type (recipe.h). A matrix whose type changes is decoded to
// f32 rows (any type quant::dequantize_row reads: F32, F16, BF16, Q8_0, ...) and encoded with
// quant::quantize_rows (bit-exact with ggml's quantizers), each routed expert with its own
// slice of the importance matrix when one is given (as llama-quantize does); IQ2_XXS without
// an imatrix entry gets all-ones weights (what convert-hf uses, since ggml requires weights),
// and so does every weight-taking type with `uniform_weights`.
// A tensor whose type does not change is copied byte for byte. As in convert-hf, a non-expert
// matrix whose rows are not a whole number of the type's blocks is stored as F16 (noted);
// routed experts that cannot take the type are an error.
//
// Every tensor's hash — XXH64 of (source type, shape, source bytes, target type, importance
// weights) — is recorded in OUT's metadata (ds4.quantize.hashes, one string "name=hex" per
// tensor). With `reuse`, a tensor whose hash equals the one recorded in the old file (and whose
// old type and shape are the target's) is copied from it instead of recomputed, so the output
// is byte-identical to a full run.
//
// With `prune`, the mask's pruned experts leave the file (prune_tensors.h): the expert tensors,
// router rows and selection biases of pruned layers are re-indexed before the recipe applies,
// and an imatrix slice goes to the expert it was collected for.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "quantize/expert_profile.h"
#include "quantize/imatrix.h"
#include "quantize/recipe.h"

namespace ds4::quantize {

struct QuantizeOptions {
  Recipe recipe;
  std::optional<Imatrix> imatrix;
  std::string imatrix_path;   // recorded in the output's metadata
  std::string reuse_path;     // "" = no reuse
  // Tensors without imatrix weights get all-ones weights (ggml's importance-weighted search)
  // instead of ggml's reference rounding, for every type whose quantizer takes weights (not
  // Q8_0 / float). Off: byte-identical with llama-quantize without an imatrix.
  bool uniform_weights = false;
  // Drop this mask's pruned experts from the file (prune_tensors.h); prune_path names it in
  // errors and is not otherwise read.
  std::optional<PruneMask> prune;
  std::string prune_path;
  int threads = 0;            // <= 0: all hardware threads
  // Called after each tensor: index, total, name, what happened ("quantized", "copied",
  // "reused"), output bytes so far, seconds so far.
  std::function<void(size_t, size_t, const std::string&, const std::string&, uint64_t, double)> progress;
};

struct QuantizeReport {
  size_t tensors = 0, quantized = 0, copied = 0, reused = 0;
  size_t with_imatrix = 0;     // quantized tensors that used imatrix weights
  int64_t pruned_experts = 0;  // --prune: routed experts dropped (all layers)
  uint64_t pruned_bytes = 0;   // --prune: output bytes those experts would have taken
  uint64_t in_bytes = 0, out_bytes = 0;
  double seconds = 0;
  std::vector<std::string> notes;   // fallbacks and recipe warnings
};

// One line per tensor: name, source type, target type, and why (rule line or "vector").
struct PlanLine {
  std::string name;
  GgmlType from = GgmlType::F32, to = GgmlType::F32;
  std::string note;
};
std::vector<PlanLine> plan_quantize(const std::string& in_path, const Recipe& recipe, std::vector<std::string>* notes);

QuantizeReport quantize_file(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o);

}  // namespace ds4::quantize
