#include "compute/backends.h"

#include "core/error.h"
#ifdef DS4_HAVE_CUDA
#include "compute/cuda/cuda_backend.h"
#endif

namespace ds4::compute {

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  if (o.name == "cpu") {
    CpuOptions co;
    co.float_activations = o.float_activations;
    return make_cpu_backend(o.pool, co);
  }
  if (o.name == "cuda") {
#ifdef DS4_HAVE_CUDA
    CudaOptions co;
    co.float_activations = o.float_activations;
    co.verbose = o.verbose;
    return make_cuda_backend(co);
#else
    fail("backend 'cuda': this build has no CUDA support (build with `make cuda`, -DDS4_CUDA=ON)");
#endif
  }
#ifdef DS4_HAVE_CUDA
  fail("unknown backend '{}' (available: cpu, cuda)", o.name);
#else
  fail("unknown backend '{}' (available: cpu)", o.name);
#endif
}

bool backend_is_shared(const std::string& name) { return name == "cuda"; }

}  // namespace ds4::compute
