#pragma once
// Routed experts from the streaming provider (src/stream) for any model family whose MoE is
// the backend's moe_experts op (deepseek4 and qwen35moe): the same op, run per expert as each
// arrives (cached ones first) on the tokens routed to it, then each token's outputs summed in
// slot order as moe_experts does (from 0, with add), so the result is bit-identical to the
// resident op. Only the routing comes to the host; rows are gathered and outputs summed with
// backend ops, so on a device backend whose provider has a device tier the weights, inputs and
// outputs never leave the device.
#include <cstdint>
#include <vector>

#include "compute/backend.h"

namespace ds4::stream {
class ExpertProvider;
}

namespace ds4::model {

// x: n rows of d (the MoE input); experts / weights: n x K routing slots; limit: the SwiGLU
// clamp moe_experts takes (0 = none). `guess`, when not empty, is handed to the provider as
// layer il+1's lookahead after this layer's experts are pinned. Writes y (n x d).
void streamed_moe_experts(compute::Backend& be, stream::ExpertProvider& xp, int64_t il, int64_t d, int64_t K,
                          int64_t n, float limit, const compute::Buffer<float>& x,
                          const compute::Buffer<int32_t>& experts, const compute::Buffer<float>& weights,
                          const std::vector<int32_t>& guess, compute::Buffer<float>& y);

}  // namespace ds4::model
