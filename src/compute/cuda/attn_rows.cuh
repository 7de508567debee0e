#pragma once
// The rows one attention query visits (its window, then its compressed or selected rows), shared
// by the attention kernels of cuda_ops_attention.cu and attention_tiled.cu. Device code only.
#include <cstdint>

#include "compute/cuda/cuda_ops.h"

namespace ds4::cuda {

// The visited rows of one query, from its position (read on the device in a recorded step).
// Query z = blockIdx.z of a chunk sits at kv.pos + z (a decode step launches one, z = 0).
struct AttnSpan {
  int64_t first_pos, n_win, n_comp, total;
  const int32_t* idx;
};
__device__ inline AttnSpan attn_span(const AttnRows& kv) {
  const int64_t z = blockIdx.z;
  const int64_t pos = kv.pos.get() + z;
  const int64_t first = pos - kv.window + 1 > 0 ? pos - kv.window + 1 : 0;
  const int64_t n_comp = kv.n_comp.ratio > 0 ? (kv.n_comp.pos.get() + z + 1) / kv.n_comp.ratio : kv.n_comp.n;
  const int32_t* idx = kv.idx;
  if (idx && kv.idx_per_query) idx = n_comp > kv.n_idx ? idx + z * kv.n_idx : nullptr;
  const int64_t n_sel = idx ? kv.n_idx : n_comp;
  return {first, pos - first + 1, n_comp, pos - first + 1 + (kv.comp ? n_sel : 0), idx};
}

__device__ inline const float* attn_row(const AttnRows& kv, const AttnSpan& sp, int64_t r, int64_t head_dim,
                                        int* err) {
  if (r < sp.n_win) {
    const int64_t pp = sp.first_pos + r;
    if (kv.fresh) {
      const int64_t f0 = kv.fresh_pos0.get();
      if (pp >= f0) return kv.fresh + (pp - f0) * head_dim;
    }
    return kv.ring + (pp % kv.window) * head_dim;
  }
  int64_t c = r - sp.n_win;
  if (sp.idx) {
    const int32_t v = sp.idx[c];
    if (v < 0 || v >= sp.n_comp) {
      if (atomicCAS(err, 0, kErrAttnIndex) == 0) err[1] = v;
      return nullptr;
    }
    c = v;
  }
  return kv.comp + c * head_dim;
}

// AttnRows::ring_store: the query's own row into its ring slot, by block (0, 0, 0) of the
// first kernel of the attention (every scores kernel calls this first).
__device__ inline void attn_store_fresh(const AttnRows& kv, int64_t head_dim) {
  if (!kv.ring_store || (blockIdx.x | blockIdx.y | blockIdx.z) != 0) return;
  float* dst = kv.ring_store + (kv.pos.get() % kv.window) * head_dim;
  for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = kv.fresh[i];
}

}  // namespace ds4::cuda
