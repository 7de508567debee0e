#pragma once
// The operations a model's forward pass is written against (architecture.md: "model code is
// written once, in terms of backend ops; backends implement ops, not models").
//
// Data layout conventions shared by all ops:
//  * activations are f32, row-major: a batch of `rows` vectors of `n` contiguous floats;
//  * weights are used in place from the model file: a Matrix holds `n_out` rows of `n_in`
//    elements in one ggml block format (spec §3 convention: y[o] = sum_i W[o][i] x[i]).
// Every op computes row r of its output from row r of its inputs only, with the same
// arithmetic whatever the batch size, so a batched prefill and a token-by-token decode
// produce identical values.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "quant/types.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::compute {

struct Matrix {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;    // elements per row (ggml ne0)
  int64_t n_out = 0;   // rows (ggml ne1)
  size_t row_stride = 0;  // bytes between rows

  const uint8_t* row(int64_t o) const { return data + static_cast<size_t>(o) * row_stride; }
  // Rows [first, first+count) as a matrix of their own (e.g. one group's rows).
  Matrix rows(int64_t first, int64_t count) const {
    return {type, row(first), n_in, count, row_stride};
  }
};

struct HcParams {
  int n_hc = 0;
  int64_t n = 0;              // width of one stream
  const float* scale = nullptr;  // 3 (or 1 for the head)
  const float* base = nullptr;   // n_mix
  int sinkhorn_iters = 0;
  float hc_eps = 0;   // pre bias and Sinkhorn divisor eps
  float rms_eps = 0;  // eps of the streams' RMS
};

// The quantization-aware rounding steps of spec §5.2-5.4 (see compute/numerics.h).
enum class ActRound {
  Fp8,          // FP8 E4M3 round trip in blocks of 64 over the first n_round values
  HadamardFp4,  // Hadamard transform of the row, then FP4 E2M1 round trip in blocks of 32
};

// One attention head set's key/value rows: every row is used as key and as value (K = V).
struct KvRows {
  const float* const* rows = nullptr;  // pointers to `count` rows of head_dim floats
  int64_t count = 0;
};

// A backend instance keeps scratch buffers: use one per thread of control (per session).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // y[r][o] = sum_i W[o][i] * x[r][i], r < rows. Quantized weight types are multiplied
  // against activations quantized to quant::vec_dot_type(W.type) (Q8_0 or Q8_K), as ggml does;
  // F32/F16/BF16 weights against the f32 activations.
  virtual void matmul(const Matrix& w, const float* x, int64_t rows, float* y) = 0;

  // y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * (w ? w : 1); the mean accumulates in double.
  // y may alias x.
  virtual void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) = 0;

  // Rotates the last 2*|freqs| dims of each of n_heads heads (head_dim apart) by
  // theta_k = pos * freqs[k] on adjacent pairs; inverse rotates by -theta.
  virtual void rope_tail(float* x, int64_t n_heads, int64_t head_dim, std::span<const double> freqs, int64_t pos,
                         bool inverse) = 0;

  // For each head h: o_h = sum_k e^{s_k - m} v_k / (e^{sink_h - m} + sum_k e^{s_k - m}),
  // s_k = scale * q_h . kv_k (spec §6.7). q and out: [n_heads][head_dim].
  virtual void sink_attention(const float* q, int64_t n_heads, int64_t head_dim, KvRows kv, const float* sinks,
                              float scale, float* out) = 0;

  // CSA indexer scores (spec §6.6): scores[c] = sum_h w[h] * max(0, q_h . keys[c]) for c < n_keys.
  // q: [n_heads][head_dim]; keys: n_keys contiguous rows of head_dim.
  virtual void indexer_scores(const float* q, const float* w, int64_t n_heads, int64_t head_dim, const float* keys,
                              int64_t n_keys, float* scores) = 0;

  // Hyper-connection pre (spec §6.2 steps 1-6, §6.9). X: rows x [n_hc][n] streams; mix: rows x
  // n_mix raw products fn . flat(X) (scaled in place by the streams' inverse RMS).
  // With post/comb: n_mix = (2+n_hc)*n_hc, split into pre, post and the Sinkhorn comb.
  // Without (the output head): n_mix = n_hc, pre only. x_in[r] = sum_i pre[i] X[r][i].
  virtual void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
                      float* comb) = 0;
  // Hyper-connection post (spec §6.3): X'[j] = post[j] y + sum_i comb[i][j] X[i]. Xout != X.
  virtual void hc_post(const float* y, const float* X, const float* post, const float* comb, int n_hc, int64_t n,
                       float* Xout) = 0;

  // Applies `kind` to `rows` rows of `row_len` floats (row r at x + r*row_len), touching the
  // first n_round values of each (FP8: the non-RoPE dims; Hadamard+FP4: the whole row).
  virtual void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) = 0;

  // h = silu(min(g, limit)) * clamp(u, -limit, limit) * weight (limit <= 0: no clamp).
  virtual void swiglu(const float* g, const float* u, int64_t n, float limit, float weight, float* h) = 0;

  // Per-dimension softmax pooling over `slots` (value, score) pairs (spec §6.5):
  // out[j] = sum_s softmax_s(score[s][j]) * value[s][j]; all -inf scores give 0.
  virtual void softmax_pool(const float* const* values, const float* const* scores, int64_t slots, int64_t n,
                            float* out) = 0;
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
