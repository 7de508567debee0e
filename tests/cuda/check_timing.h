#pragma once
// Shared by the GPU check programs (cuda_gemv_check, cuda_mma_check, cuda_fgemm_tc_check): a
// fatal CUDA-call check, and the median time of a stream's work by CUDA events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace ds4::cuda_check {

inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FATAL: CUDA %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `reps` runs, after 3 warm-up runs, of the events around fn(i) on stream s (i: the
// run's index, for callers that rotate buffers).
inline double time_ms(const std::function<void(int)>& fn, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) fn(i);
  ck(cudaStreamSynchronize(s), "sync");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a, s), "record");
    fn(i);
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float t = 0;
    ck(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(ms);
}
inline double time_ms(const std::function<void()>& fn, cudaStream_t s, int reps) {
  return time_ms([&](int) { fn(); }, s, reps);
}

}  // namespace ds4::cuda_check
