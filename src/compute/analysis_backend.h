#pragma once
// A Backend decorator for model analysis, without touching the model code: it forwards every op
// to the wrapped backend unchanged and, around some of them, observes or adjusts:
//  * imatrix: for every matmul / matmul_grouped against a known weight, the sum of squared
//    input values per column and the row count; for moe_experts, per routed expert, the same
//    for the gate/up inputs (the token's row) and for the down input (swiglu of the expert's
//    gate and up outputs, recomputed here with the wrapped backend's ops; without the routing
//    weight, as llama.cpp applies that after the down projection);
//  * expert profile: from moe_route's outputs, per layer and expert the selection count and
//    the routing-weight sum;
//  * prune mask: moe_route of a masked layer runs with a selection bias of -inf for pruned
//    experts (added to the layer's own bias), so they never win and the routing weights of the
//    others are computed as before.
// The layer of a moe_route call is that of the router matmul (weights with `router_layer` >= 0)
// whose output is the call's logits. Inputs are downloaded to the host to be counted, so
// observation costs time; a model run without analysis never sees this class (zero cost).
// Not for streamed experts (their ExpertSets point into the cache, not at known weights).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace ds4::compute {

// A weight tensor the decorator may see: host bytes [data, data + bytes).
struct KnownWeight {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::string name;
  int64_t n_in = 0;        // columns (ne0)
  int64_t n_mat = 1;       // matrices (experts) in the tensor
  int router_layer = -1;   // >= 0: this is layer L's router (its matmul output feeds moe_route)
  // The model scales this product by the input row's inverse RMS afterwards (DeepSeek V4's
  // hyper-connection mixes): count the RMS-normalized rows, what the product effectively sees
  // (and what llama.cpp, which normalizes first, multiplies). eps as the model's.
  bool rms_normalized_input = false;
  float rms_eps = 0;
};

// Statistics shared by every session of an engine (thread-safe).
struct AnalysisStats {
  struct Entry {
    int64_t n_in = 0, n_mat = 1;
    std::vector<double> sums;    // n_mat * n_in
    std::vector<double> counts;  // n_mat
  };
  mutable std::mutex mu;
  std::vector<std::string> names;  // parallel to entries (index = KnownWeight index)
  std::vector<Entry> entries;
  // Expert profile: [layer][expert].
  int64_t n_layer = 0, n_expert = 0;
  uint64_t tokens = 0;  // rows embedded: each evaluated token once
  std::vector<std::vector<uint64_t>> count;
  std::vector<std::vector<double>> weight;
};

struct AnalysisConfig {
  std::vector<KnownWeight> weights;  // any order
  bool imatrix = false;
  bool profile = false;
  int64_t n_layer = 0, n_expert = 0;
  // Per layer: empty, or n_expert flags (1 = pruned). Requires the layer's router in `weights`.
  std::vector<std::vector<uint8_t>> pruned;
  // Per layer: the layer's own selection bias values (empty: none).
  std::vector<std::vector<float>> layer_bias;
};

class AnalysisBackend final : public Backend {
 public:
  // `inner` and `stats` must outlive this object. stats is sized here when empty.
  AnalysisBackend(Backend& inner, std::shared_ptr<AnalysisStats> stats, std::shared_ptr<const AnalysisConfig> cfg);
  ~AnalysisBackend() override;

  const char* name() const override { return inner_.name(); }
  void* alloc(size_t bytes) override { return inner_.alloc(bytes); }
  void release(void* p) override { inner_.release(p); }
  void upload(void* dst, const void* src, size_t bytes) override { inner_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { inner_.download(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { inner_.copy(dst, src, bytes); }
  void fill(float* x, int64_t n, float v) override { inner_.fill(x, n, v); }
  void synchronize() override { inner_.synchronize(); }
  void register_weights(const void* data, size_t bytes, const std::string& what) override {
    inner_.register_weights(data, bytes, what);
  }
  bool device_memory() const override { return inner_.device_memory(); }
  uint8_t* alloc_weight_slots(size_t bytes, const std::string& what) override {
    return inner_.alloc_weight_slots(bytes, what);
  }
  void release_weight_slots(uint8_t* p) override { inner_.release_weight_slots(p); }
  bool pin_host(void* p, size_t bytes) override { return inner_.pin_host(p, bytes); }
  void unpin_host(void* p) override { inner_.unpin_host(p); }
  void upload_async(void* dst, const void* src, size_t bytes) override { inner_.upload_async(dst, src, bytes); }
  uint64_t fence() override { return inner_.fence(); }
  bool fence_done(uint64_t f, bool wait) override { return inner_.fence_done(f, wait); }
  uint64_t device_free_bytes() override { return inner_.device_free_bytes(); }

  void matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride, int64_t y_stride) override;
  void matmul_grouped(const Matrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                      int64_t y_stride) override;
  void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) override {
    inner_.rms_norm(x, w, n, rows, eps, y);
  }
  void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs, int64_t pos0,
                 int64_t pos_step, bool inverse) override {
    inner_.rope_tail(x, rows, n_heads, head_dim, freqs, pos0, pos_step, inverse);
  }
  void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) override {
    inner_.act_round(x, rows, row_len, n_round, kind);
  }
  void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
              float* h) override {
    inner_.swiglu(g, u, rows, n, limit, weights, h);
  }
  void add(float* y, const float* x, int64_t n) override { inner_.add(y, x, n); }
  // Counts the tokens evaluated (AnalysisStats::tokens).
  void embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) override;
  void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
              float* comb) override {
    inner_.hc_pre(X, mix, rows, p, x_in, post, comb);
  }
  void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc, int64_t n,
               float* Xout) override {
    inner_.hc_post(y, X, post, comb, rows, n_hc, n, Xout);
  }
  // hc_post_add runs its default body (add, hc_post: both forwarded above).
  void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks, float scale,
                 float* out) override {
    inner_.attention(q, n_heads, head_dim, kv, sinks, scale, out);
  }
  void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim, const float* keys,
                      RowCount n_keys, float* scores) override {
    inner_.indexer_scores(q, w, scale, n_heads, head_dim, keys, n_keys, scores);
  }
  void top_k(const float* scores, RowCount n, int64_t k, int32_t* idx) override { inner_.top_k(scores, n, k, idx); }
  void store_row(float* ring, int64_t ring_rows, int64_t n, int64_t pos, const float* src) override {
    inner_.store_row(ring, ring_rows, n, pos, src);
  }
  void compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                        const float* scp, int64_t width, float* kv, float* score) override {
    inner_.compressor_store(ape, pos, ratio, lanes, kvp, scp, width, kv, score);
  }
  void compressor_emit(const CompressorEmit& e, int64_t pos) override { inner_.compressor_emit(e, pos); }
  void compressor_chunk(const Matrix& ape, const CompressorEmit& e, int64_t pos0, int64_t count, const float* kvp,
                        const float* scp) override {
    inner_.compressor_chunk(ape, e, pos0, count, kvp, scp);
  }
  void indexer_chunk(const IndexerChunk& c, int64_t pos0, int64_t count) override { inner_.indexer_chunk(c, pos0, count); }
  void attention_chunk(const float* q, int64_t n_heads, int64_t head_dim, const AttnChunk& kv, int64_t pos0,
                       int64_t count, const float* sinks, float scale, float* out) override {
    inner_.attention_chunk(q, n_heads, head_dim, kv, pos0, count, sinks, scale, out);
  }
  void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                       float* out) override {
    inner_.compressor_pool(kv, score, ratio, lanes, dim, out);
  }
  void moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p, int32_t* experts,
                 float* weights) override;
  // moe_router runs its default body on purpose: the router's matmul (observed, naming the layer)
  // then moe_route (observed, masked), never the inner backend's fused router.
  void moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                   const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                   float* y) override;

  // Decode-step graphs are not forwarded: a replayed step would bypass the observed ops, so an
  // analysed session always runs op by op (the defaults: nothing recorded, nothing replayed).
  const float* step_replay(const StepKey& key, int64_t pos, int32_t token, std::span<const int32_t> extra,
                           bool* record) override {
    (void)key, (void)pos, (void)token, (void)extra;
    *record = false;
    return nullptr;
  }

  void copy_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t rows, int64_t n) override {
    inner_.copy_rows(y, y_stride, x, x_stride, rows, n);
  }
  void rope_neox(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                 int64_t pos0) override {
    inner_.rope_neox(x, rows, n_heads, head_dim, freqs, pos0);
  }
  void mul_sigmoid(float* y, const float* g, int64_t n) override { inner_.mul_sigmoid(y, g, n); }
  void sigmoid(float* x, int64_t n) override { inner_.sigmoid(x, n); }
  void attention_causal(const float* q, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                        const float* k_cache, const float* v_cache, int64_t pos0, float scale, float* out) override {
    inner_.attention_causal(q, rows, n_heads, n_kv_heads, head_dim, k_cache, v_cache, pos0, scale, out);
  }
  void moe_route_softmax(const float* logits, int64_t rows, int64_t n_expert, int64_t k, bool norm, int32_t* experts,
                         float* weights) override {
    inner_.moe_route_softmax(logits, rows, n_expert, k, norm, experts, weights);
  }
  void conv1d_silu(const float* x, int64_t rows, int64_t channels, int64_t kernel, const float* w, float* conv_state,
                   float* y) override {
    inner_.conv1d_silu(x, rows, channels, kernel, w, conv_state, y);
  }
  void gdn_gates(const float* a, const float* b, const float* dt_bias, const float* ssm_a, int64_t rows,
                 int64_t n_heads, float* g, float* beta) override {
    inner_.gdn_gates(a, b, dt_bias, ssm_a, rows, n_heads, g, beta);
  }
  void gated_delta_rule(const float* qkv, const float* g, const float* beta, int64_t rows, int64_t n_k_heads,
                        int64_t n_v_heads, int64_t dk, int64_t dv, float l2_eps, float* state, float* out) override {
    inner_.gated_delta_rule(qkv, g, beta, rows, n_k_heads, n_v_heads, dk, dv, l2_eps, state, out);
  }

 private:
  int find_weight(const uint8_t* p) const;  // index into cfg_->weights, or -1
  void observe_rows(int wi, int64_t mat, const float* host_rows, int64_t rows, int64_t stride, int64_t groups);

  Backend& inner_;
  std::shared_ptr<AnalysisStats> stats_;
  std::shared_ptr<const AnalysisConfig> cfg_;
  std::vector<size_t> order_;                   // cfg_->weights sorted by data
  std::vector<std::vector<float>> route_bias_;  // per layer: bias with -inf for pruned experts (or empty)
  // The latest router outputs (device pointer -> layer), for moe_route's layer.
  const float* last_router_out_ = nullptr;
  int last_router_layer_ = -1;
  std::vector<float> host_;  // download scratch
};

}  // namespace ds4::compute
