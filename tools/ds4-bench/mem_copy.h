#pragma once
// A STREAM-like copy figure for ds4-bench: the memory bandwidth a decode step is bounded by.
#include <cstddef>

namespace ds4bench {

// Copies `bytes` between two fresh buffers (pages touched first), split over `threads`
// threads (0: all cores), `reps` times; returns the best rate in GB/s counting bytes read plus
// bytes written, as STREAM's copy does. With read_gbs, also the best rate of reading one buffer
// (bytes read only, each repetition right after its copy): the bound of a step that only reads
// its weights.
double copy_bandwidth_gbs(int threads, size_t bytes, int reps, double* read_gbs = nullptr);

}  // namespace ds4bench
