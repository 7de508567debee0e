#pragma once
// Synthetic deepseek4 GGUF with the published Flash tensor table and metadata (spec §1, §3)
// and seeded random weights: for loader, validator, streaming and I/O tests without the real
// 81-153 GB files.
#include <cstdint>
#include <string>
#include <vector>

#include "convert/gguf_layout.h"

namespace ds4::convert {

enum class Sparse {
  None,     // every byte written
  Experts,  // routed-expert tensors are file holes (read back as zeros)
  All,      // every tensor is a hole: only the header and table occupy disk
};

struct SynthOptions {
  std::string out_path;
  Recipe recipe = Recipe::FlashQ2;  // flash-q2 or flash-q4 (any recipe is accepted)
  uint32_t layers = 43;
  uint64_t seed = 1;
  Sparse sparse = Sparse::None;
};

struct SynthReport {
  size_t n_tensors = 0;
  uint64_t file_bytes = 0;     // apparent size
  uint64_t written_bytes = 0;  // tensor bytes actually written (not holes)
};

// Random but valid data: F32/F16 values of moderate size, quantized blocks whose f16 scale
// fields are finite and small and whose other bytes are random (every bit pattern of those
// fields is a valid code), tid2eid rows of distinct expert ids.
SynthReport synth(const SynthOptions& o);

// Bytes of one tensor as synth makes them from generator state `state`, in pieces of `step`
// rows: jump = false carries one generator through the pieces in order (the definition), jump
// = true starts each piece from the state its predecessors would leave (what synth does, so
// that pieces can be generated in parallel). Equal bytes either way; for tests.
std::vector<uint8_t> synth_tensor_bytes(const TensorPlan& p, uint64_t state, uint64_t step, bool jump,
                                        const ModelShape& shape);

}  // namespace ds4::convert
