#pragma once
// Backend selection by name ("cpu", "cuda"): the one place that knows which backends this
// build has, so front ends and the engine share the error messages.
#include <memory>
#include <string>

#include "compute/backend.h"

namespace ds4::compute {

struct BackendOptions {
  std::string name = "cpu";
  ThreadPool* pool = nullptr;      // cpu: compute threads (may be null)
  bool float_activations = false;  // see CpuOptions / CudaOptions
  bool verbose = true;             // cuda: progress lines on stderr
};

// Throws ds4::Error for an unknown name, a backend this build lacks, or a backend that cannot
// start (no GPU).
std::unique_ptr<Backend> make_backend(const BackendOptions& o);

// True when `name` shares one instance between sessions (device backends hold the weights).
bool backend_is_shared(const std::string& name);

}  // namespace ds4::compute
