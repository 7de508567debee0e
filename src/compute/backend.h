#pragma once
// The operations a model's forward pass is written against (architecture.md: "model code is
// written once, in terms of backend ops; backends implement ops, not models").
//
// Memory. Every activation, state and scratch pointer an op takes is *backend memory*: it came
// from Backend::alloc (host memory for the CPU backend, device memory for CUDA) — a model never
// touches those bytes directly, it moves them with upload/download/copy. Weights are different:
// Matrix::data, the `const float*` weight vectors (norms, sinks, hyper-connection scale/base,
// router bias) and tid2eid are *host* pointers into the model's mapping or its small owned
// buffers, announced once with register_weights(); a device backend translates them to its own
// copies, the CPU backend uses them in place.
//
// Layout conventions shared by all ops:
//  * activations are f32, row-major: a batch of `rows` vectors of `n` contiguous floats;
//  * a Matrix holds `n_out` rows of `n_in` elements in one ggml block format
//    (spec §3 convention: y[o] = sum_i W[o][i] x[i]).
// Every op computes row r of its output from row r of its inputs only, with the same
// arithmetic whatever the batch size, so a batched prefill and a token-by-token decode
// produce identical values on one backend.
//
// Ordering: ops run in call order on one stream of work. upload/download/copy are ordered
// with the ops; download returns once the bytes are on the host.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/types.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::compute {

struct Matrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;  // host pointer (see the memory note above)
  int64_t n_in = 0;    // elements per row (ggml ne0)
  int64_t n_out = 0;   // rows (ggml ne1)
  size_t row_stride = 0;  // bytes between rows

  const uint8_t* row(int64_t o) const { return data + static_cast<size_t>(o) * row_stride; }
  // Rows [first, first+count) as a matrix of their own (e.g. one group's rows).
  Matrix rows(int64_t first, int64_t count) const { return {type, row(first), n_in, count, row_stride}; }
  size_t bytes() const { return static_cast<size_t>(n_out) * row_stride; }
};

// A 3-D routed-expert tensor [n_in, n_out, n_expert]: expert e is an n_out x n_in matrix
// starting expert_stride bytes after expert e-1.
struct ExpertSet {
  Matrix first;  // expert 0
  int64_t n_expert = 0;
  size_t expert_stride = 0;
  Matrix expert(int64_t e) const {
    Matrix m = first;
    m.data = first.data + static_cast<size_t>(e) * expert_stride;
    return m;
  }
  size_t bytes() const { return static_cast<size_t>(n_expert) * expert_stride; }
};

struct HcParams {
  int n_hc = 0;
  int64_t n = 0;                 // width of one stream
  const float* scale = nullptr;  // weight: 3 (or 1 for the head)
  const float* base = nullptr;   // weight: n_mix
  int sinkhorn_iters = 0;
  float hc_eps = 0;   // pre bias and Sinkhorn divisor eps
  float rms_eps = 0;  // eps of the streams' RMS
};

// The quantization-aware rounding steps of spec §5.2-5.4 (see compute/numerics.h).
enum class ActRound {
  Fp8,          // FP8 E4M3 round trip in blocks of 64 over the first n_round values
  HadamardFp4,  // Hadamard transform of the row, then FP4 E2M1 round trip in blocks of 32
};

// Routing of one MoE layer (spec §6.8).
struct RouteParams {
  int64_t n_expert = 0;
  int64_t k = 0;                       // experts per token
  const float* bias = nullptr;         // weight, optional: selection-only bias (trap 13)
  const int32_t* tid2eid = nullptr;    // weight, optional: hash routing, n_vocab rows of k ids
  bool norm = true;                    // divide by max(sum, 6.103515625e-5) (trap 15)
  float scale = 1.0f;                  // expert_weights_scale
  // Backend memory, optional (benchmark routing, stream/synthetic_routing.h): rows x k expert
  // ids that replace the top-k selection of a learned (not hash-routed) layer; the weights are
  // still formed from the router's scores at those ids, with the same normalization.
  const int32_t* forced = nullptr;
};

// Attention keys/values for one query (K = V, spec §6.7), visited in this order:
//  1. the raw sliding window: `ring` holds `window` rows of head_dim, position pp in slot
//     pp % window; positions max(0, pos-window+1) .. pos, ascending;
//  2. compressed rows `comp` (n_comp rows of head_dim): rows idx[0..n_idx) in the given order
//     when idx is non-null (idx is backend memory), else rows 0 .. n_comp-1.
// ratio > 0 states that n_comp == (pos + 1) / ratio (rows are emitted at window ends), and
// comp_capacity bounds it for every later position: a device backend recording a decode step
// (step graphs, below) derives the count from the position it reads on the device.
struct AttnKv {
  const float* ring = nullptr;
  int64_t window = 0;
  int64_t pos = 0;
  const float* comp = nullptr;
  int64_t n_comp = 0;
  const int32_t* idx = nullptr;
  int64_t n_idx = 0;
  int64_t ratio = 0;
  int64_t comp_capacity = 0;
};

// A number of compressed rows. Plain (ratio 0): n. Position-derived (at()): (pos + 1) / ratio,
// at most `capacity` at any later position, so a recorded decode step can count on the device.
struct RowCount {
  int64_t n = 0;
  int64_t pos = -1;
  int64_t ratio = 0;
  int64_t capacity = 0;
  RowCount(int64_t count) : n(count) {}  // NOLINT: a plain count converts implicitly
  static RowCount at(int64_t pos, int64_t ratio, int64_t capacity) {
    RowCount c((pos + 1) / ratio);
    c.pos = pos, c.ratio = ratio, c.capacity = capacity;
    return c;
  }
};

// One compressor's emission at the end of a window (spec §6.5; compressor_emit below).
struct CompressorEmit {
  float* kv = nullptr;       // lanes*ratio slots of lanes*dim (the state's kv and score)
  float* score = nullptr;
  int64_t ratio = 0, lanes = 0, dim = 0;
  float* rows = nullptr;     // append-only rows of dim; the window ending at pos fills row (pos+1)/ratio - 1
  const float* norm = nullptr;  // RMSNorm weight (dim), a weight vector
  float eps = 0;
  std::span<const double> freqs;  // RoPE of the row at the window's first position
  bool round = false;             // the activation rounding of the emitted row
  ActRound round_kind = ActRound::Fp8;
  int64_t n_round = 0;
};

// Identifies one decode step's sequence of ops (step graphs): the state it reads and writes
// (a serial number, unique per State) and a variant word for what else changes the sequence.
struct StepKey {
  uint64_t state = 0;
  uint64_t variant = 0;
  bool operator==(const StepKey&) const = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- memory ------------------------------------------------------------------------------
  // `bytes` of backend memory, 256-byte aligned, contents undefined. Throws ds4::Error naming
  // the size when there is not enough memory.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // ranges must not overlap
  virtual void fill(float* x, int64_t n, float value) = 0;
  // Waits until every op issued so far has finished (and reports its failure, if any).
  virtual void synchronize() {}

  // ---- concurrency hints ---------------------------------------------------------------------
  // Ops issued between branch_begin() and branch_end() (the branch) depend only on what was
  // issued before branch_begin(), and nothing issued after branch_end() reads what they write
  // until join(): a backend with more than one queue may run the branch beside the ops that
  // follow it. Every buffer the branch uses must outlive join(). A backend with one timeline (the
  // default) runs everything in issue order, so results never depend on these calls.
  virtual void branch_begin() {}
  virtual void branch_end() {}
  virtual void join() {}

  // Makes host bytes [data, data+bytes) usable as weights (see the memory note). A device
  // backend copies them once; calling it again for a range already held is a no-op. `what`
  // names the range in progress lines and errors.
  virtual void register_weights(const void* data, size_t bytes, const std::string& what) {
    (void)data, (void)bytes, (void)what;
  }

  // ---- streamed experts: the device tier (src/stream/device_tier.h) ------------------------
  // A backend whose memory is apart from the host's can keep cached routed experts in its own
  // memory: the streaming provider copies them in from its pinned host cache and hands the
  // model views into that memory, which every op takes as weights as they are. The defaults
  // describe a backend without such memory (the CPU, which uses the host cache in place).
  virtual bool device_memory() const { return false; }
  // `bytes` of backend memory whose addresses every op accepts as weight pointers in place (no
  // register_weights copy, no translation); contents undefined. Throws ds4::Error naming `what`
  // when there is not enough memory or the backend has none (the default).
  virtual uint8_t* alloc_weight_slots(size_t bytes, const std::string& what);
  virtual void release_weight_slots(uint8_t* p) { (void)p; }
  // Page-locks host memory [p, p+bytes) so copies from it run asynchronously at the link's
  // speed; false when it could not (the memory stays pageable; copies still work, slower).
  virtual bool pin_host(void* p, size_t bytes) {
    (void)p, (void)bytes;
    return true;
  }
  virtual void unpin_host(void* p) { (void)p; }
  // Copies host bytes to backend memory, ordered with the ops, without waiting for the copy:
  // the host bytes must stay unchanged until a fence made after this call has passed.
  virtual void upload_async(void* dst, const void* host_src, size_t bytes) { upload(dst, host_src, bytes); }
  // A marker after every op issued so far; fence_done(f) is true once they have all finished
  // (wait: blocks until then). Fences pass in the order they were made. Not inside a recorded
  // decode step.
  virtual uint64_t fence() { return 0; }
  virtual bool fence_done(uint64_t f, bool wait) {
    (void)f, (void)wait;
    return true;
  }
  // Device memory free now (0 for a backend without device memory).
  virtual uint64_t device_free_bytes() { return 0; }

  // ---- linear algebra ------------------------------------------------------------------------
  // y[r*y_stride + o] = sum_i W[o][i] * x[r*x_stride + i], r < rows (strides in floats; 0 means
  // dense: n_in and n_out). Quantized weight types are multiplied against activations
  // quantized to quant::vec_dot_type(W.type) (Q8_0 or Q8_K), as ggml does; F32/F16/BF16
  // weights against the f32 activations.
  virtual void matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride = 0,
                      int64_t y_stride = 0) = 0;

  // ys[i] = ws[i] . x for every i (rows rows, dense strides): independent products of the same
  // activations, which a device backend may quantize once and run in one launch. The values are
  // those of one matmul per matrix (the default). Every ws[i] has the same n_in.
  virtual void matmul_many(std::span<const Matrix* const> ws, const float* x, int64_t rows,
                           std::span<float* const> ys) {
    if (ws.size() != ys.size()) fail("matmul_many: {} matrices but {} outputs", ws.size(), ys.size());
    for (size_t i = 0; i < ws.size(); ++i) matmul(*ws[i], x, rows, ys[i]);
  }

  // Grouped rows: W's n_out rows form `groups` equal groups, and output row o of group g reads
  // elements [g*n_in, (g+1)*n_in) of the activation row (groups*n_in values; x_stride 0 means
  // that): y[r*y_stride + o] = sum_i W[o][i] * x[r*x_stride + g*n_in + i]. Each group equals
  // matmul on its rows and slice (the default implementation), so the values are the same;
  // a device backend does it in one launch.
  virtual void matmul_grouped(const Matrix& w, int64_t groups, const float* x, int64_t rows, float* y,
                              int64_t x_stride = 0, int64_t y_stride = 0) {
    if (groups < 1 || w.n_out % groups != 0) fail("matmul_grouped: {} rows do not split into {} groups", w.n_out, groups);
    const int64_t per = w.n_out / groups;
    const int64_t xs = x_stride ? x_stride : groups * w.n_in, ys = y_stride ? y_stride : w.n_out;
    for (int64_t g = 0; g < groups; ++g) matmul(w.rows(g * per, per), x + g * w.n_in, rows, y + g * per, xs, ys);
  }

  // y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * (w ? w : 1); the mean accumulates in double.
  // w is a weight (or null). y may alias x.
  virtual void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) = 0;

  // x: rows x [n_heads][head_dim]. Rotates the last 2*|freqs| dims of each head of row r by
  // theta_k = (pos0 + r*pos_step) * freqs[k] on adjacent pairs (angle formed in double);
  // inverse rotates by -theta. freqs is host memory that outlives the backend.
  virtual void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                         int64_t pos0, int64_t pos_step, bool inverse) = 0;

  // Applies `kind` to `rows` rows of `row_len` floats (row r at x + r*row_len), touching the
  // first n_round values of each (FP8: the non-RoPE dims; Hadamard+FP4: the whole row).
  virtual void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) = 0;

  // h[r][i] = silu(min(g, limit)) * clamp(u, -limit, limit) * (weights ? weights[r] : 1), for
  // rows x n values (limit <= 0: no clamp).
  virtual void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
                      float* h) = 0;

  // y[i] += x[i], i < n.
  virtual void add(float* y, const float* x, int64_t n) = 0;

  // ---- model-shaped ops ----------------------------------------------------------------------
  // X[t] = `copies` copies of row tokens[t] of `table` decoded to f32 (tokens: backend memory).
  virtual void embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) = 0;

  // Hyper-connection pre (spec §6.2 steps 1-6, §6.9). X: rows x [n_hc][n] streams; mix: rows x
  // n_mix raw products fn . flat(X) (scaled in place by the streams' inverse RMS).
  // With post/comb: n_mix = (2+n_hc)*n_hc, split into pre, post and the Sinkhorn comb.
  // Without (the output head): n_mix = n_hc, pre only. x_in[r] = sum_i pre[i] X[r][i].
  virtual void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
                      float* comb) = 0;
  // A sub-layer's whole pre-mix as one op: mix = fn . flat(X) (matmul into the caller's rows x
  // n_mix scratch), hc_pre, then, when `norm`, x_in = rms_norm(x_in) * norm_w in place (norm_w
  // may be null: no weight). The default runs those three ops; a backend may fuse them into
  // fewer kernels but must give the same result.
  virtual void hc_pre_norm(const Matrix& fn, const float* X, float* mix, int64_t rows, const HcParams& p, bool norm,
                           const float* norm_w, float norm_eps, float* x_in, float* post, float* comb);
  // The attention sub-layer's q and kv after their projections, for `rows` tokens at positions
  // pos0 + r: q (rows x [n_heads][head_dim]) RMS-normalized per head without a weight, kv (rows x
  // head_dim) with kv_norm, both rotated by rope_tail(freqs), then kv's first n_round values
  // rounded to FP8 (n_round 0: none). The default runs those five ops in that order; a backend
  // may fuse them but must give the same values.
  virtual void attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim, const float* kv_norm,
                             float eps, std::span<const double> freqs, int64_t pos0, int64_t n_round);
  // Hyper-connection post (spec §6.3), per row r: X'[j] = post[j] y + sum_i comb[i][j] X[i]
  // (y: rows x n, X/Xout: rows x [n_hc][n], post: rows x n_hc, comb: rows x n_hc x n_hc). Xout != X.
  virtual void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc,
                       int64_t n, float* Xout) = 0;
  // hc_post of y + y2 (y2 added element-wise first, as add(y, y2, rows * n) does; y may be left
  // holding the sum). The default runs those two ops; a backend may fuse them but must give the
  // same values.
  virtual void hc_post_add(float* y, const float* y2, const float* X, const float* post, const float* comb,
                           int64_t rows, int n_hc, int64_t n, float* Xout);

  // For each head h of one query: o_h = sum_k e^{s_k - m} v_k / (e^{sink_h - m} + sum_k e^{s_k - m}),
  // s_k = scale * q_h . kv_k over the rows of `kv` in its order (spec §6.7). q, out:
  // [n_heads][head_dim]; sinks is a weight.
  virtual void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks,
                         float scale, float* out) = 0;

  // CSA indexer scores (spec §6.6) for one query: scores[c] = sum_h (w[h]*scale) * max(0, q_h . keys[c])
  // for c < n_keys (w[h]*scale rounded to float first). q: [n_heads][head_dim]; keys: n_keys
  // contiguous rows of head_dim.
  virtual void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim,
                              const float* keys, RowCount n_keys, float* scores) = 0;
  // The k highest of scores[0..n) (equal scores: the lower index wins), written to idx in
  // ascending index order. k <= n.
  virtual void top_k(const float* scores, RowCount n, int64_t k, int32_t* idx) = 0;

  // ring[(pos % ring_rows) * n + i] = src[i], i < n: one row into a ring buffer.
  virtual void store_row(float* ring, int64_t ring_rows, int64_t n, int64_t pos, const float* src);

  // Compressor (spec §6.5). store, for the token at `pos` with slot s = (lanes == 2 ? ratio : 0)
  // + pos % ratio: kv[s*width + j] = kvp[j]; score[s*width + j] = f32(ape[pos % ratio][j]) + scp[j]
  // for j < width (ape is a weight Matrix of a float type; the bias joins before storing, trap 10).
  virtual void compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                                const float* scp, int64_t width, float* kv, float* score) = 0;
  // pool: kv/score hold lanes*ratio rows of lanes*dim. Slot s < ratio reads columns [0, dim) ;
  // with two lanes, slot s >= ratio reads columns [dim, 2*dim) (trap 9). Per column j:
  // out[j] = sum_s softmax_s(score[s][j]) * kv[s][j]; all -inf scores give 0.
  virtual void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                               float* out) = 0;
  // Nothing unless the window ends at pos ((pos + 1) % ratio == 0); then: pool into the next
  // row, RMSNorm it, RoPE at the window's first position pos + 1 - ratio (trap 8), round it,
  // and with two lanes move the current window's slots to the previous lane. The default body
  // composes the ops above in that order (backend_step_ops.cpp).
  virtual void compressor_emit(const CompressorEmit& e, int64_t pos);

  // Router (spec §6.8): s_e = sqrt(softplus(logits[t][e])); experts[t] = tid2eid[tokens[t]] when
  // hash-routed, else the top k of s_e + bias[e] (equal: lower id first, in descending order);
  // weights[t][i] = s_{experts[t][i]} / denom * scale. logits: rows x n_expert; tokens, experts
  // (rows x k int32) and weights (rows x k) are backend memory. With p.forced (and no tid2eid),
  // experts[t] = forced[t] (ids checked against n_expert) instead of the top k.
  virtual void moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p,
                         int32_t* experts, float* weights) = 0;
  // The router of a MoE sub-layer: logits = router . x (rows x p.n_expert, the caller's scratch),
  // then moe_route(logits, tokens, rows, p, experts, weights). The default runs matmul and
  // moe_route; a backend may fuse them but must give the same values.
  virtual void moe_router(const Matrix& router, const float* x, int64_t rows, const int32_t* tokens,
                          const RouteParams& p, float* logits, int32_t* experts, float* weights);
  // Routed experts: for each token t and slot i < k, with e = experts[t][i]:
  //   h = swiglu(gate_e . x[t], up_e . x[t], limit) * weights[t][i];  out_i = down_e . h
  // and y[t] = sum over i in slot order of out_i (y overwritten). x, y: rows x n_in(gate).
  virtual void moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                           const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                           float* y) = 0;

  // ---- a chunk of consecutive positions (prefill) ------------------------------------------
  // The attention sublayer's position-ordered work (ring, compressors, indexer, attention) for
  // `count` consecutive positions pos0 .. pos0+count-1 as one op each, so a device backend can
  // run a chunk in a few launches instead of a few per token. Each default body is the
  // token-by-token loop over the single ops above (backend_step_ops.cpp: the CPU backend's
  // numerics are the loop's), and an override must give the same values.

  // For t < count, in order, p = pos0 + t: compressor_store(ape, p, e.ratio, e.lanes, kvp + t*W,
  // scp + t*W, W, e.kv, e.score) then compressor_emit(e, p), with W = e.lanes * e.dim.
  virtual void compressor_chunk(const Matrix& ape, const CompressorEmit& e, int64_t pos0, int64_t count,
                                const float* kvp, const float* scp);

  // For every t < count whose position p = pos0 + t sees more than k keys ((p+1)/ratio > k): the
  // indexer's choice for that query, as the decode step makes it (spec §6.6): its query
  // q + t*n_heads*head_dim copied, RoPE'd at p, Hadamard+FP4 rounded when `round`, scored by
  // indexer_scores against keys[0 .. (p+1)/ratio) with weights w + t*n_heads, and the top k of
  // those written to idx + t*k. Rows of idx for the other queries are left as they are.
  struct IndexerChunk {
    const float* q = nullptr;  // count rows of n_heads*head_dim (backend memory, unchanged)
    const float* w = nullptr;  // count rows of n_heads
    float scale = 0;
    int64_t n_heads = 0, head_dim = 0;
    const float* keys = nullptr;  // the indexer's compressed rows
    int64_t ratio = 0, capacity = 0;
    std::span<const double> freqs;
    bool round = false;
    int64_t k = 0;
    int32_t* idx = nullptr;  // count rows of k
  };
  virtual void indexer_chunk(const IndexerChunk& c, int64_t pos0, int64_t count);

  // Attention for `count` queries (q, out: count rows of [n_heads][head_dim]), query t at
  // p = pos0 + t, each as attention() sees it after the chunk's rows up to p were stored: for t
  // in order, store_row(ring, window, head_dim, p, fresh + t*head_dim) then attention() with the
  // raw window, the (p+1)/ratio compressed rows of comp (none when comp is null), and idx +
  // t*n_idx as their selection when idx is non-null and (p+1)/ratio > n_idx. On return the ring
  // holds what those store_row calls leave.
  struct AttnChunk {
    float* ring = nullptr;
    int64_t window = 0;
    const float* fresh = nullptr;  // count rows of head_dim: the chunk's own keys/values
    const float* comp = nullptr;
    int64_t ratio = 0, comp_capacity = 0;
    const int32_t* idx = nullptr;
    int64_t n_idx = 0;
    // What attention() sees for query t at position p (the contract above).
    AttnKv at(int64_t t, int64_t p) const {
      AttnKv a{ring, window, p};
      if (comp) {
        a.comp = comp, a.n_comp = (p + 1) / ratio, a.ratio = ratio, a.comp_capacity = comp_capacity;
        if (idx && a.n_comp > n_idx) a.idx = idx + t * n_idx, a.n_idx = n_idx;
      }
      return a;
    }
  };
  virtual void attention_chunk(const float* q, int64_t n_heads, int64_t head_dim, const AttnChunk& kv, int64_t pos0,
                               int64_t count, const float* sinks, float scale, float* out);

  // ---- decode-step graphs ------------------------------------------------------------------
  // A device backend may record the ops of one decode step (one token) once and replay them
  // for later tokens, reading the position and the token on the device. The forward pass
  // records through the ordinary ops; while recording, positions reach ops only as explicit
  // arguments (rope_tail pos0, AttnKv/RowCount with their ratio, store_row, compressor_*), no
  // op may synchronize, and the step's token is read from step_token(). Defaults: no graphs.
  //
  // Replays the step recorded for `key` at `pos` with `token` and returns its logits (backend
  // memory, valid until the next step), or null when none is recorded; *record then says
  // whether the caller should record this one. `extra`: further per-step inputs (the benchmark
  // routing's expert ids), written to the device with {pos, token} before each replay; a key's
  // steps must always pass the same number of them (at most kMaxStepExtra).
  static constexpr size_t kMaxStepExtra = 4096;
  virtual const float* step_replay(const StepKey& key, int64_t pos, int32_t token, std::span<const int32_t> extra,
                                   bool* record) {
    (void)key, (void)pos, (void)token, (void)extra;
    *record = false;
    return nullptr;
  }
  // Starts recording the step for `key` at `pos`; the step's ops then read its token at the
  // returned pointer, and its extra inputs right after it (result + 1 .. result + extra.size()).
  virtual const int32_t* step_record_begin(const StepKey& key, int64_t pos, int32_t token,
                                           std::span<const int32_t> extra);
  // Ends the recording, runs the recorded step once and returns its logits (backend memory).
  virtual const float* step_record_end(const float* logits);
  // Drops an unfinished recording (an op failed) and records that key no more; never throws.
  virtual void step_record_abort() noexcept {}

  // ---- ops of the qwen35moe family (Gated DeltaNet + gated full attention + softmax MoE) -----
  // The CPU backend implements them (cpu/cpu_qwen_ops.cpp). The defaults below throw
  // ds4::Error "op X is not implemented on the <name> backend", so a backend that lacks one
  // fails loudly instead of computing garbage (backend_qwen_ops.cpp).

  // Strided row copy: y[r*y_stride + i] = x[r*x_stride + i] for r < rows, i < n.
  virtual void copy_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t rows, int64_t n);
  // NeoX-style RoPE on the first 2*|freqs| dims of every head: the pair (i, i + |freqs|) of head
  // h of row r is rotated by theta_i = (pos0 + r) * freqs[i] (angle formed in double); the other
  // dims pass. x: rows x [n_heads][head_dim]. freqs is host memory that outlives the backend.
  virtual void rope_neox(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                         int64_t pos0);
  // y[i] *= 1 / (1 + exp(-g[i])), i < n.
  virtual void mul_sigmoid(float* y, const float* g, int64_t n);
  // x[i] = 1 / (1 + exp(-x[i])), i < n.
  virtual void sigmoid(float* x, int64_t n);
  // Causal multi-head attention with grouped KV heads, no sinks. Query row r (position pos0+r)
  // attends to cache positions 0..pos0+r. q, out: rows x [n_heads][head_dim]; k_cache, v_cache:
  // positions x [n_kv_heads][head_dim]; query head h uses KV head h / (n_heads / n_kv_heads).
  // Per head: o = sum_p softmax_p(scale * q . k_p) v_p.
  virtual void attention_causal(const float* q, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                const float* k_cache, const float* v_cache, int64_t pos0, float scale, float* out);
  // Softmax router: p = softmax(logits[t]) over n_expert; experts[t] = the k largest p in
  // descending order (equal: lower id first); weights[t][i] = p_i / sum of the k chosen (norm)
  // or p_i. logits: rows x n_expert; experts, weights: rows x k.
  virtual void moe_route_softmax(const float* logits, int64_t rows, int64_t n_expert, int64_t k, bool norm,
                                 int32_t* experts, float* weights);
  // Short causal depthwise convolution + SiLU, token by token over rows, carrying the last
  // kernel-1 inputs in conv_state ((kernel-1) x channels, oldest first; updated in place):
  // y[t][c] = silu(sum_{j<kernel} w[c][j] * x_{t-kernel+1+j}[c]). w: channels x kernel (weight).
  virtual void conv1d_silu(const float* x, int64_t rows, int64_t channels, int64_t kernel, const float* w,
                           float* conv_state, float* y);
  // DeltaNet gates per row r and value head h: g = ssm_a[h] * softplus(a[r][h] + dt_bias[h])
  // (ssm_a = -exp(A_log), a weight), beta = sigmoid(b[r][h]). a, b, g, beta: rows x n_heads.
  virtual void gdn_gates(const float* a, const float* b, const float* dt_bias, const float* ssm_a, int64_t rows,
                         int64_t n_heads, float* g, float* beta);
  // Gated delta rule, token by token. Row r of qkv holds [q: n_k_heads x dk | k: n_k_heads x dk |
  // v: n_v_heads x dv]; value head h reads key head h % n_k_heads (llama.cpp's tiled order).
  // q and k are L2-normalised (x / sqrt(sum x^2 + l2_eps)), q scaled by 1/sqrt(dk); then with
  // the state S_h (dv rows of dk: S_h[j][i] couples value j and key i):
  //   S *= exp(g[r][h]);  d_j = beta[r][h] * (v_j - S[j] . k);  S[j] += d_j k;  out[r][h][j] = S[j] . q
  // state: n_v_heads x dv x dk (updated in place); out: rows x [n_v_heads][dv].
  virtual void gated_delta_rule(const float* qkv, const float* g, const float* beta, int64_t rows, int64_t n_k_heads,
                                int64_t n_v_heads, int64_t dk, int64_t dv, float l2_eps, float* state, float* out);

 protected:
  [[noreturn]] void not_implemented(const char* op) const;
};

// Typed backend memory owned by a Backend (RAII; movable).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, size_t count) : be_(&be), n_(count) {
    if (count) p_ = static_cast<T*>(be.alloc(count * sizeof(T)));
  }
  Buffer(Buffer&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset() {
    if (p_) be_->release(p_);
    p_ = nullptr, n_ = 0;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  Backend* backend() const { return be_; }

  // The first `count` elements (all by default) copied to the host.
  std::vector<T> to_host(size_t count = SIZE_MAX) const {
    std::vector<T> v(count == SIZE_MAX ? n_ : count);
    if (!v.empty()) be_->download(v.data(), p_, v.size() * sizeof(T));
    return v;
  }
  // Overwrites the first src.size() elements.
  void from_host(std::span<const T> src) {
    if (!src.empty()) be_->upload(p_, src.data(), src.size() * sizeof(T));
  }

 private:
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};

struct CpuOptions {
  // Multiply quantized weights against f32 activations (rows decoded on the fly) instead of
  // quantizing activations to Q8_0/Q8_K. Slower; isolates weight decoding from activation
  // rounding when comparing with a float reference.
  bool float_activations = false;
};

// The CPU backend. `pool` may be null (single-threaded); it must outlive the backend.
std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool, CpuOptions opt = {});

}  // namespace ds4::compute
