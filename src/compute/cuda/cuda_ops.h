#pragma once
// Internal to the CUDA backend: launchers for the element-wise and model-shaped kernels of
// compute::Backend (the matmul/MoE kernels are in gemv.h). All pointers are device pointers
// (weights already translated by the backend); work is queued on `stream`; a launch failure
// throws ds4::Error naming the kernel. Arguments are validated by the backend before the call.
//
// Data-dependent failures (a token id or row index read on the device that is out of range)
// cannot throw from a kernel: the kernel records them in the device error word `err`
// (err[0] = an ErrCode, first writer wins; err[1] = the offending value) and skips the bad
// element; the backend reads the word at the next download/synchronize and throws there.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ds4::cuda {

enum ErrCode : int {
  kErrNone = 0,
  kErrEmbedToken = 1,      // embed: token id outside the table
  kErrAttnIndex = 2,       // attention: idx[] outside the compressed rows
  kErrRouteToken = 3,      // moe_route: token id outside tid2eid
  kErrRouteExpert = 4,     // moe_route: tid2eid (or forced) entry outside [0, n_expert)
};

// A position: the constant `off`, or, inside a recorded decode step, *at + off with `at` the
// step's position in device memory (written before each replay).
struct DevPos {
  const int32_t* at = nullptr;
  int64_t off = 0;
#ifdef __CUDACC__
  __device__ int64_t get() const { return at ? static_cast<int64_t>(*at) + off : off; }
#endif
};
// A row count: (pos + 1) / ratio when ratio > 0, else n.
struct DevCount {
  DevPos pos;
  int64_t ratio = 0;
  int64_t n = 0;
#ifdef __CUDACC__
  __device__ int64_t get() const { return ratio > 0 ? (pos.get() + 1) / ratio : n; }
#endif
};

// Where a kernel also writes the Q8_0 copy of its one-row output (qs: n bytes, d: n/32 floats,
// the bytes gemv's quantize_acts would write for that row); qs null: no copy.
struct Q8Out {
  int8_t* qs = nullptr;
  float* d = nullptr;
};

// Throws ds4::Error("CUDA <what>: <text>") when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
// After a launch: throws naming the kernel when the launch failed.
void check_launch(const char* kernel);
// Blocks of `threads` covering n elements (at least one); throws beyond one grid's x range.
unsigned grid_for(int64_t n, int threads);

// ---- element-wise and small ops (cuda_ops_misc.cu) ------------------------------------------
void fill(float* x, int64_t n, float value, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
// q (one row, n % 32 == 0): also write y's Q8_0 copy there (cuda_quant_act.cuh).
void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y, cudaStream_t s,
              Q8Out q = {});
// freqs: device, n_pairs doubles.
void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, const double* freqs, int64_t n_pairs,
               DevPos pos0, int64_t pos_step, bool inverse, cudaStream_t s);
// ring[(pos % ring_rows) * n + i] = src[i].
void store_row(float* ring, int64_t ring_rows, int64_t n, DevPos pos, const float* src, cudaStream_t s);
// kind 0: FP8 E4M3 (blocks of 64), 1: Hadamard + FP4 E2M1 (blocks of 32; n_round a power of two).
void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, int kind, cudaStream_t s);
// rope_tail of one row that also writes the rotated row's Q8_0 copy to q; false (nothing
// launched) where the shape does not allow it (n_heads * head_dim % 32, odd head_dim, no q).
bool rope_tail_q8(float* x, int64_t n_heads, int64_t head_dim, const double* freqs, int64_t n_pairs, DevPos pos0,
                  bool inverse, Q8Out q, cudaStream_t s);
// Backend::attn_qkv_prep in one launch (FP8 round of kv's first n_round values); false (nothing
// launched) for a shape it does not take (head_dim above 1536, more than 65535 rows).
bool attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim, const float* kv_norm,
                   float eps, const double* freqs, int64_t n_pairs, DevPos pos0, int64_t n_round, cudaStream_t s);
void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights, float* h,
            cudaStream_t s, Q8Out q = {});
// table: device rows of n_in elements (F32, F16, BF16, Q8_0, Q2_K, Q4_K).
void embed(GgmlType type, const uint8_t* table, int64_t n_in, int64_t n_rows, size_t row_stride,
           const int32_t* tokens, int64_t rows, int copies, float* X, int* err, cudaStream_t s);
// ---- hyper-connections (cuda_ops_hc.cu) ------------------------------------------------------
// post/comb null: the output head (n_mix = n_hc, pre only).
void hc_pre(const float* X, float* mix, int64_t rows, int n_hc, int64_t n, const float* scale, const float* base,
            int sinkhorn_iters, float hc_eps, float rms_eps, float* x_in, float* post, float* comb, cudaStream_t s);
// One row of Backend::hc_pre_norm in one kernel: fn (device rows of fn_in elements, wtype 0 F32,
// 1 F16, 2 BF16) times X, hc_pre, then the norm. Returns false (nothing launched) for shapes it
// does not take (the caller runs the separate ops). overlap: the variant whose staging is
// asynchronous and whose Sinkhorn runs beside x_in and the norm (cuda_ops_hc.cu). q (with the
// norm, n % 32 == 0): the normed x_in's Q8_0 copy.
bool hc_pre_fused(int wtype, const uint8_t* fn, size_t fn_stride, int64_t fn_in, int64_t fn_out, const float* X,
                  int n_hc, int64_t n, const float* scale, const float* base, int sinkhorn_iters, float hc_eps,
                  float rms_eps, bool norm, const float* norm_w, float norm_eps, float* mix, float* x_in, float* post,
                  float* comb, bool overlap, cudaStream_t s, Q8Out q = {});
// comb alone from the scaled mixes (Sinkhorn by one warp, as the fused kernel's tail runs it):
// cuda_backend_check times it to show what the Sinkhorn costs inside hc_pre_norm.
void hc_comb(const float* mix, const float* scale, const float* base, int n_hc, int sinkhorn_iters, float hc_eps,
             float* comb, cudaStream_t s);
// y2 (optional): hc_post of y + y2 (backend.h hc_post_add), the add's float sum first.
void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc, int64_t n,
             float* Xout, cudaStream_t s, const float* y2 = nullptr);
// ape: device rows (row_stride bytes apart) of a float type (F32, F16, BF16), at least width
// elements each and at least `ratio` rows; slot (lanes == 2 ? ratio : 0) + pos % ratio.
void compressor_store(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, DevPos pos, int64_t ratio,
                      int64_t lanes, const float* kvp, const float* scp, int64_t width, float* kv, float* score,
                      cudaStream_t s);
// The end of a recorded compressor emission: when (pos + 1) % ratio == 0, row (pos+1)/ratio - 1
// of `rows` = y (dim floats) and, with two lanes, the current window's slots move to the
// previous lane; otherwise nothing.
void compressor_commit(DevPos pos, int64_t ratio, int64_t lanes, int64_t dim, const float* y, float* rows, float* kv,
                       float* score, cudaStream_t s);
void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim, float* out,
                     cudaStream_t s);
// A chunk of positions pos0 .. pos0+count-1 (Backend::compressor_chunk) from the chunk's
// projections kvp/scp (count rows of lanes*dim) and the state kv/score as it was before it:
// pool: every window ending in the chunk pooled as the token loop would pool it, into its row
// of `rows` (the norm, RoPE and rounding follow as separate ops); state: kv/score left as the
// token loop leaves them (run after pool: it overwrites what pool reads).
void compressor_chunk_pool(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, int64_t pos0, int64_t count,
                           int64_t ratio, int64_t lanes, int64_t dim, const float* kvp, const float* scp,
                           const float* kv, const float* score, float* rows, cudaStream_t s);
void compressor_chunk_state(GgmlType ape_type, const uint8_t* ape, size_t ape_stride, int64_t pos0, int64_t count,
                            int64_t ratio, int64_t lanes, int64_t dim, const float* kvp, const float* scp, float* kv,
                            float* score, cudaStream_t s);
// The last min(count, ring_rows) of rows pos0 .. pos0+count-1 (src: count rows of n) into the ring.
void store_rows(float* ring, int64_t ring_rows, int64_t n, int64_t pos0, int64_t count, const float* src,
                cudaStream_t s);

// ---- attention, indexer, selection (cuda_ops_attention.cu) ----------------------------------
// The rows one query visits: window positions max(0, pos-window+1) .. pos, then compressed
// rows idx[0..n_idx) (idx non-null) or 0 .. n_comp-1. The kernels derive the counts from pos
// on the device; max_rows bounds window + compressed rows at any position the launch serves.
struct AttnRows {
  const float* ring = nullptr;
  int64_t window = 0;
  DevPos pos;
  const float* comp = nullptr;
  DevCount n_comp;
  const int32_t* idx = nullptr;
  int64_t n_idx = 0;
  int64_t max_rows = 0;
  // A chunk of queries (n_queries > 1, query z at pos + z): window rows at positions >=
  // fresh_pos0 are read from `fresh` (rows of head_dim from that position on) instead of the
  // ring; with idx_per_query, query z uses idx + z*n_idx only when it sees more than n_idx
  // compressed rows, and all of them otherwise.
  const float* fresh = nullptr;
  DevPos fresh_pos0;
  bool idx_per_query = false;
  // One query (decode) only: ring_store[(pos % window) * head_dim ..] = fresh (store_row), done
  // by the first kernel's block (0, 0, 0). The query reads its own row from `fresh` (fresh_pos0
  // = pos) and no other row of its window sits in that slot, so no read waits for the store.
  float* ring_store = nullptr;
};
// q, out: n_queries rows of [n_heads][head_dim]; max_rows bounds every query's rows.
void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnRows& kv, const float* sinks, float scale,
               float* out, int* err, cudaStream_t s, int64_t n_queries = 1);
// n_keys: the keys scored (at most max_keys at any position the launch serves). A chunk of
// n_queries: query y at n_keys' position + y, q/w rows y, scores row y (max_keys apart); the
// queries with at most skip_k keys are skipped (skip_k < 0: none).
void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim, const float* keys,
                    DevCount n_keys, int64_t max_keys, float* scores, cudaStream_t s, int64_t n_queries = 1,
                    int64_t skip_k = -1);
// The k highest of scores[0..n) (equal: the lower index), ascending index order; k <= n <= max_n.
// A chunk of n_queries as indexer_scores lays it out (idx rows of k), skip_k likewise.
void top_k(const float* scores, DevCount n, int64_t max_n, int64_t k, int32_t* idx, cudaStream_t s,
           int64_t n_queries = 1, int64_t skip_k = -1);
// The MoE router's selection (backend.h moe_route) of rows tokens, one block each (moe_route.cuh;
// the router product that ends in it, gemv.h matmul_route, shares the routine): logits are rows x
// n_expert (3 * n_expert floats fit 48 KiB), 1 <= k <= min(64, n_expert). The fused router's
// one-warp top k takes at most kRouteMaxExperts.
constexpr int kRouteMaxExperts = 512;
struct RouteArgs {
  const int32_t* tokens;    // device, one id per token (hash routing reads it)
  int n_expert, k;
  const float* bias;        // device, n_expert, or null
  const int32_t* tid2eid;   // device, n_tid_rows rows of k ids, or null
  int64_t n_tid_rows;
  const int32_t* forced;    // device, rows x k ids replacing the top k (benchmark routing), or null
  bool norm;
  float scale;
  int32_t* experts;         // rows x k
  float* weights;           // rows x k
  int* err;                 // the backend's error word (kErrRoute*)
};
void moe_route(const float* logits, int64_t rows, const RouteArgs& a, cudaStream_t s);

}  // namespace ds4::cuda

namespace ds4::compute {
class Backend;
}
namespace ds4::cuda {
// The stream a CUDA backend queues its work on (for the check programs' CUDA-event timing);
// null when `be` is not a CUDA backend.
cudaStream_t backend_stream(compute::Backend& be);
}  // namespace ds4::cuda
