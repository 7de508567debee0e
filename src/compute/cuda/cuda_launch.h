#pragma once
// One launch path for the CUDA backend's kernels (internal): cudaLaunchKernelEx, with
// programmatic dependent launch (PDL) when DS4_CUDA_PDL=1. With PDL a kernel may be scheduled
// while the one before it on the stream is still running; a step graph captured from such
// launches keeps those programmatic edges, so a kernel's launch and block scheduling overlap
// its predecessor's tail instead of following it (decode steps are ~40 short kernels per layer).
// That is only correct because every kernel launched here begins with pdl_begin()
// (cuda_util.cuh): it lets the next kernel launch, then waits until this kernel's predecessors
// have finished and their writes are visible, before touching any memory.
// Errors are reported as before: check_launch(name) after the call reads cudaGetLastError.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace ds4::cuda {

// A backend switch from the environment: "0" turns it off, any other non-empty value on; unset
// or empty leaves `on_by_default`. Callers read it once (a static) so a step graph never mixes.
inline bool env_switch(const char* name, bool on_by_default) {
  const char* v = std::getenv(name);
  if (!v || !*v) return on_by_default;
  return std::strcmp(v, "0") != 0;
}
// A backend size from the environment: a whole number in [lo, hi], else (unset, empty, not a
// number, out of range) `fallback`. Read once by callers, as env_switch.
inline long env_int(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == 0 && n >= lo && n <= hi) ? n : fallback;
}

// DS4_CUDA_PDL=1 (read once). Off by default until measured on a GPU.
bool pdl_enabled();

template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = pdl_enabled() ? attr : nullptr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // the error stays for check_launch
}

}  // namespace ds4::cuda
