#pragma once
// Register-tiled kernels for the scores and the weighted rows of a chunk of attention queries
// (cuda::attention with n_queries > 1), in the CPU's order bit for bit like the one-query
// kernels of cuda_ops_attention.cu, which they replace there: those give a warp per dot or a
// thread per output and reload q or the row for every product, which bounds a prefill chunk by
// loads rather than arithmetic. DS4_CUDA_ATTN_TILED=0 keeps the one-query kernels.
#include <cstdint>

#include <cuda_runtime.h>

#include "compute/cuda/cuda_ops.h"

namespace ds4::cuda {

// Head dims of 64, 128, 256 or 512 (q held in registers), chunks of more than one query, or
// one query where DS4_CUDA_ATTN_TILED1 names `part` (1 scores, 2 weighted rows); one query's
// scores also unless DS4_CUDA_ATTN1_SCORES=0 (small tiles: attn_scores_tiled).
bool attn_tiled_applies(int64_t head_dim, int64_t n_queries, int part);
// S[z][h][r] = dot(q_z,h, row r) * scale for the visited rows of query z (NaN for a bad index).
void attn_scores_tiled(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, float scale, float* S,
                       int* err, unsigned n_queries, cudaStream_t s);
// out[z][h] = (sum over rows in order of E[z][h][r] * row r) * inv[z][h].
// One query's softmax and weighted rows in one kernel (decode; DS4_CUDA_ATTN1_FUSED=0 keeps the
// softmax kernel and k_attn_out): out[z][h] = (sum over rows in order of e_r * row r) / den with
// e_r = exp(S[z][h][r] - m), m = max(sink, S...), den = exp(sink - m) + e_0 + e_1 + ..., the
// operations of those two kernels bit for bit. S is read, not overwritten.
bool attn_decode_fused();
void attn_softmax_out(const float* S, const float* sinks, int64_t n_heads, int64_t head_dim, const AttnRows& kv,
                      float* out, int* err, unsigned n_queries, cudaStream_t s);
void attn_out_tiled(const float* E, const float* inv, int64_t n_heads, int64_t head_dim, const AttnRows& kv,
                    float* out, int* err, unsigned n_queries, cudaStream_t s);

}  // namespace ds4::cuda
