#pragma once
// The CUDA backend (built with -DDS4_CUDA=ON): every op of compute/backend.h on one CUDA
// stream, weights copied once to device memory by register_weights().
#include <memory>
#include <string>

#include "compute/backend.h"

namespace ds4::compute {

struct CudaOptions {
  int device = 0;
  // Quantized weights against f32 activations (weights decoded in the kernel) instead of
  // Q8_0/Q8_K activations: the float-reference mode, as CpuOptions::float_activations.
  bool float_activations = false;
  // Progress lines (weight upload GB/s, memory plan) on stderr.
  bool verbose = true;
};

// Throws ds4::Error with the CUDA error text when no usable device exists.
std::unique_ptr<Backend> make_cuda_backend(CudaOptions opt = {});

// With DS4_CUDA_PROFILE set (not "0"), a CUDA backend brackets every op with CUDA events and
// sums the times per op (matmul/moe_experts per weight type and shape); the table is printed
// on stderr when the backend is destroyed. This returns it now (empty when profiling is off
// or `be` is not a CUDA backend), optionally starting a new tally. The events add a little
// time per op. Profiling turns decode-step graphs off, except DS4_CUDA_PROFILE=graph, which
// records the event pairs into the graphs ("[step]" rows: GPU time per op inside a replay).
std::string cuda_profile_report(Backend& be, bool reset = false);

// "step graphs: R recorded, P replays" of a CUDA backend (empty for another backend).
// DS4_CUDA_GRAPHS=0 turns the graphs off.
std::string cuda_step_stats(Backend& be);

// One line per visible device (name, memory, compute capability), or the reason there is none.
std::string cuda_device_summary();

}  // namespace ds4::compute
