#pragma once
// Routed experts from the streaming provider (src/stream) for any model family whose MoE is
// the backend's moe_experts op (deepseek4 and qwen35moe): the same op, run per expert as each
// arrives (cached ones first) on the tokens routed to it, then each token's outputs summed in
// slot order as moe_experts does (from 0, with add), so the result is bit-identical to the
// resident op. Only the routing comes to the host; rows are gathered and outputs summed with
// backend ops, so on a device backend whose provider has a device tier the weights, inputs and
// outputs never leave the device.
//
// Host compute: an expert the provider hands out as a host view (ExpertLease::Expert::host; a
// device-tier miss under ProviderOptions::host_compute) is computed by `host`, a CPU backend,
// where its bytes sit: the layer's input comes to the host once (only when some expert needs
// it), `host` runs the same moe_experts op on the expert's rows, and each slot's output goes
// back into the session backend's slot buffer, so the slot-order sum and the result are the
// same bits as resident mode (the CUDA kernels reproduce the CPU's results bit for bit). The
// device experts are queued first and the host ones computed while the device runs them.
#include <cstdint>
#include <vector>

#include "compute/backend.h"

namespace ds4::stream {
class ExpertProvider;
}

namespace ds4::model {

// x: n rows of d (the MoE input); experts / weights: n x K routing slots; limit: the SwiGLU
// clamp moe_experts takes (0 = none). `guess`, when not empty, is handed to the provider as
// layer il+1's lookahead after this layer's experts are pinned. `host`: the backend for host
// views (null: the session backend takes every view, which only a backend without device
// memory can). Writes y (n x d).
void streamed_moe_experts(compute::Backend& be, stream::ExpertProvider& xp, int64_t il, int64_t d, int64_t K,
                          int64_t n, float limit, const compute::Buffer<float>& x,
                          const compute::Buffer<int32_t>& experts, const compute::Buffer<float>& weights,
                          const std::vector<int32_t>& guess, compute::Buffer<float>& y,
                          compute::Backend* host = nullptr);

}  // namespace ds4::model
