#pragma once
// Internal: the CPU backend's class, shared by its source files (cpu_backend.cpp: memory
// and elementwise/linear-algebra ops; cpu_model_ops.cpp: attention, compressor, router, MoE;
// cpu_qwen_ops.cpp: the qwen35moe ops).
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "compute/backend.h"
#include "core/thread_pool.h"

namespace ds4::compute::cpu {

// Row r of a float or quantized matrix, decoded to f32 (embedding rows, ape rows).
void decode_row(const Matrix& m, int64_t r, float* out);

class CpuBackend final : public Backend {
 public:
  CpuBackend(ThreadPool* pool, CpuOptions opt) : pool_(pool), opt_(opt) {}
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;
  const char* name() const override { return "cpu"; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill(float* x, int64_t n, float value) override;

  void matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride, int64_t y_stride) override;
  void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) override;
  void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                 int64_t pos0, int64_t pos_step, bool inverse) override;
  void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) override;
  void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
              float* h) override;
  void add(float* y, const float* x, int64_t n) override;

  void embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) override;
  void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
              float* comb) override;
  void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc,
               int64_t n, float* Xout) override;
  void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks,
                 float scale, float* out) override;
  void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim,
                      const float* keys, RowCount n_keys, float* scores) override;
  void top_k(const float* scores, RowCount n, int64_t k, int32_t* idx) override;
  void compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                        const float* scp, int64_t width, float* kv, float* score) override;
  void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                       float* out) override;
  void moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p, int32_t* experts,
                 float* weights) override;
  void moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                   const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                   float* y) override;

  // qwen35moe ops (cpu_qwen_ops.cpp)
  void copy_rows(float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t rows, int64_t n) override;
  void rope_neox(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                 int64_t pos0) override;
  void mul_sigmoid(float* y, const float* g, int64_t n) override;
  void sigmoid(float* x, int64_t n) override;
  void attention_causal(const float* q, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                        const float* k_cache, const float* v_cache, int64_t pos0, float scale, float* out) override;
  void moe_route_softmax(const float* logits, int64_t rows, int64_t n_expert, int64_t k, bool norm, int32_t* experts,
                         float* weights) override;
  void conv1d_silu(const float* x, int64_t rows, int64_t channels, int64_t kernel, const float* w, float* conv_state,
                   float* y) override;
  void gdn_gates(const float* a, const float* b, const float* dt_bias, const float* ssm_a, int64_t rows,
                 int64_t n_heads, float* g, float* beta) override;
  void gated_delta_rule(const float* qkv, const float* g, const float* beta, int64_t rows, int64_t n_k_heads,
                        int64_t n_v_heads, int64_t dk, int64_t dv, float l2_eps, float* state, float* out) override;

 private:
  void parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool_) pool_->parallel_for(n, grain, fn);
    else fn(0, n);
  }
  // Splits rows over the pool in chunks of at least kMinChunkWork / work_per_row rows, so that
  // one token's small rows (decode) stay on the calling thread: waking a worker costs more
  // than the row. Every row is computed as the serial loop computes it, so results do not
  // depend on the thread count.
  static constexpr int64_t kMinChunkWork = 32768;
  void parallel_rows(int64_t rows, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& fn) {
    parallel(rows, std::max<int64_t>(1, kMinChunkWork / std::max<int64_t>(1, work_per_row)), fn);
  }
  void matmul_float_acts(const Matrix& w, const float* x, int64_t rows, float* y, int64_t xs, int64_t ys);
  // cos/sin tables of rope_tail: [n_pos][n_freq] pairs for positions pos0.., per frequency set.
  // Batch tables (several positions) and one-position tables (decode, compressor rows) have
  // their own slots so that neither evicts the other; least recently used goes first.
  struct RopeTable {
    std::vector<double> freqs;
    int64_t pos0 = 0, n_pos = 0;
    uint64_t used = 0;
    std::vector<float> cs;
  };
  const float* rope_table(std::span<const double> freqs, int64_t pos0, int64_t n_pos);
  RopeTable rope_batch_[3], rope_single_[4];
  uint64_t rope_clock_ = 0;
  // Released blocks kept for reuse by size (alloc/release may come from several threads).
  static constexpr size_t kMaxCachedBlock = size_t{64} << 20, kMaxCachedBytes = size_t{256} << 20;
  std::mutex alloc_mu_;
  std::unordered_map<void*, size_t> live_;
  std::multimap<size_t, void*> free_blocks_;
  size_t free_bytes_ = 0;
  ThreadPool* pool_;
  CpuOptions opt_;
  std::vector<uint8_t> act_buf_;
  // moe_experts scratch (gathered rows per expert and per-slot outputs)
  std::vector<float> moe_slot_out_, moe_xg_, moe_g_, moe_u_, moe_h_, moe_yd_, moe_w_;
};

}  // namespace ds4::compute::cpu
