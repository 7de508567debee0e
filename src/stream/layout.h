#pragma once
// Geometry of the routed experts of a DeepSeek V4 GGUF: per MoE layer, the three expert
// tensors blk.N.ffn_{gate,up,down}_exps.weight ([n_in, n_out, n_expert], expert e is an
// n_out x n_in matrix). Layers may differ in type (mixed-precision files); within a layer the
// three tensors may differ too (q2: IQ2_XXS gate/up, Q2_K down).
//
// Below src/model: this layer reads the tensor table itself, so it can serve experts for any
// model code that asks by (layer, expert).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ds4::gguf {
class File;
}

namespace ds4::stream {

// One weight matrix in place: field for field what compute::Matrix holds, so the model can
// convert with a plain aggregate copy. Valid while the lease that produced it is held.
struct WeightView {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_stride = 0;
};

enum Component : int { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr const char* kComponentName[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

struct ComponentShape {
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_stride = 0;  // bytes per row
  uint64_t bytes = 0;     // one expert's matrix = n_out * row_stride
};

struct LayerShape {
  int64_t layer = 0;  // blk index
  std::array<ComponentShape, 3> comp;
  uint64_t expert_bytes() const { return comp[0].bytes + comp[1].bytes + comp[2].bytes; }
};

struct ExpertLayout {
  int64_t n_layer = 0;   // MoE layers (blk 0 .. n_layer-1, all must have experts)
  int64_t n_expert = 0;
  std::vector<LayerShape> layers;
  // GGUF position of expert 0 of each (layer, component): absolute file offset.
  std::vector<std::array<uint64_t, 3>> gguf_offset;

  uint64_t total_bytes() const;       // every expert of every layer
  uint64_t max_expert_bytes() const;  // the largest one-expert record (payload only)

  // Reads the tensor table; throws ds4::Error naming the file and tensor on a missing tensor,
  // a bad shape, a type without a block layout or inconsistent expert counts.
  static ExpertLayout from_gguf(const gguf::File& f);
};

// Experts pruned per layer (ds4-gguf quantize --prune: deepseek4.expert_count_per_layer not all
// equal): layers of different expert counts, which from_gguf's one count cannot describe, so
// such a file never streams.
bool experts_pruned_per_layer(const gguf::File& f);

// "ffn_gate_exps" of layer 3 -> "blk.3.ffn_gate_exps.weight".
std::string expert_tensor_name(int64_t layer, int c);

// Experts each token is routed to: `<general.architecture>.expert_used_count` (deepseek4,
// qwen35moe, ...); 0 when the file does not say.
int64_t experts_used_per_token(const gguf::File& f);

}  // namespace ds4::stream
