#pragma once
// Dropping pruned routed experts from a DeepSeek V4 file (ds4-gguf quantize --prune MASK).
//
// A prune mask (expert_profile.h) names, per learned-routing layer, the experts the engine
// keeps out of routing (`--prune-mask`). Here they leave the file: in every pruned layer the
// routed-expert tensors (ffn_{gate,up,down}_exps, [n_in, n_out, E]) keep only the kept
// experts' matrices, the router (ffn_gate_inp, [n_embd, E]) only their rows and the selection
// bias (exp_probs_b, [E]) only their entries, all in ascending original id. The layer's
// expert count goes into `<arch>.expert_count_per_layer` (expert_count stays the largest,
// what the unpruned hash layers hold); the kept ids into ds4.prune.kept_experts.
//
// Hash-routed layers are never pruned (check_mask refuses such a mask): their tid2eid table
// sends every token to fixed experts, and every expert of such a layer is some token's, so
// none can leave without changing those tokens' outputs — a remap would be a different model.
//
// Why the result equals the unpruned file run with --prune-mask: that run selects the top k of
// the kept experts by score + bias (pruned ones get -inf), ties to the lower id, and weights the
// chosen by their unbiased scores; the pruned file computes the same router rows (each output
// of a product is its row's dot, whatever the other rows), the same scores and biases, in the
// same relative order, so it picks the same experts in the same slots and sums the same
// products in the same order: bit-identical logits (tested on the demo model).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quantize/expert_profile.h"

namespace ds4::quantize {

// The ModelKey (expert_profile.h) of a file, from its metadata: the same fields and the same
// hash-layer rule (hash_layer_count, else the leading layers with a tid2eid table) as the
// engine's.
ModelKey file_model_key(const gguf::File& f);

struct PrunePlan {
  std::string arch;
  int64_t n_expert = 0;
  std::vector<std::vector<int64_t>> kept;  // per layer: kept original ids (empty: layer unpruned)
  std::string method;
  bool any() const;
  int64_t dropped() const;  // experts removed, all layers
};

// Validates `mask` against `f` (check_mask: same model, no hash layer pruned, at least k kept)
// and that f is not pruned already. `what` names the mask in errors.
PrunePlan make_prune_plan(const gguf::File& f, const PruneMask& mask, const std::string& what);

// A tensor of a pruned layer with its pruned experts removed (owned bytes), or nothing when
// the tensor is not affected. kept_ids: the original expert of each remaining matrix / row.
struct SlicedTensor {
  gguf::TensorInfo info;        // name, type, new shape; data points into `bytes`
  std::vector<uint8_t> bytes;
  std::vector<int64_t> kept_ids;
  int64_t orig_count = 0;       // matrices / rows before
  bool per_matrix = false;      // 3-D expert tensor (the imatrix has one slice per expert)
};
std::optional<SlicedTensor> slice_tensor(const gguf::TensorInfo& t, const PrunePlan& plan, const std::string& file);

// The metadata a pruned file adds (expert_count_per_layer, ds4.prune.*).
std::vector<gguf::KeyValue> prune_metadata(const PrunePlan& plan, int64_t n_layer);

}  // namespace ds4::quantize
