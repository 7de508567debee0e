#pragma once
// The CUDA backend's class (internal to src/compute/cuda): declared here so that its member
// definitions can live in more than one file (cuda_backend.cpp: construction, memory, weights,
// the device tier and the ops; cuda_backend_chunks.cpp: the prefill chunk ops;
// cuda_backend_steps.cpp: the decode-step graphs). Nothing outside this folder includes it:
// the rest of the engine sees compute::Backend and cuda_backend.h.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/block_cache.h"
#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_ops.h"
#include "compute/cuda/gemv.h"

namespace ds4::compute {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaOptions opt);
  ~CudaBackend() override;
  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill(float* x, int64_t n, float value) override;
  void synchronize() override;
  void branch_begin() override;
  void branch_end() override;
  void join() override;
  void register_weights(const void* data, size_t bytes, const std::string& what) override;
  bool device_memory() const override { return true; }
  uint8_t* alloc_weight_slots(size_t bytes, const std::string& what) override;
  void release_weight_slots(uint8_t* p) override;
  bool pin_host(void* p, size_t bytes) override;
  void unpin_host(void* p) override;
  void upload_async(void* dst, const void* host_src, size_t bytes) override;
  uint64_t fence() override;
  bool fence_done(uint64_t f, bool wait) override;
  uint64_t device_free_bytes() override;

  void matmul(const Matrix& w, const float* x, int64_t rows, float* y, int64_t x_stride, int64_t y_stride) override;
  void matmul_grouped(const Matrix& w, int64_t groups, const float* x, int64_t rows, float* y, int64_t x_stride,
                      int64_t y_stride) override;
  void rms_norm(const float* x, const float* w, int64_t n, int64_t rows, float eps, float* y) override;
  void rope_tail(float* x, int64_t rows, int64_t n_heads, int64_t head_dim, std::span<const double> freqs,
                 int64_t pos0, int64_t pos_step, bool inverse) override;
  void act_round(float* x, int64_t rows, int64_t row_len, int64_t n_round, ActRound kind) override;
  void attn_qkv_prep(float* q, float* kv, int64_t rows, int64_t n_heads, int64_t head_dim, const float* kv_norm,
                     float eps, std::span<const double> freqs, int64_t pos0, int64_t n_round) override;
  void swiglu(const float* g, const float* u, int64_t rows, int64_t n, float limit, const float* weights,
              float* h) override;
  void add(float* y, const float* x, int64_t n) override;
  void embed(const Matrix& table, const int32_t* tokens, int64_t rows, int copies, float* X) override;
  void matmul_many(std::span<const Matrix* const> ws, const float* x, int64_t rows,
                   std::span<float* const> ys) override;
  void hc_pre_norm(const Matrix& fn, const float* X, float* mix, int64_t rows, const HcParams& p, bool norm,
                   const float* norm_w, float norm_eps, float* x_in, float* post, float* comb) override;
  void hc_pre(const float* X, float* mix, int64_t rows, const HcParams& p, float* x_in, float* post,
              float* comb) override;
  void hc_post(const float* y, const float* X, const float* post, const float* comb, int64_t rows, int n_hc,
               int64_t n, float* Xout) override;
  void hc_post_add(float* y, const float* y2, const float* X, const float* post, const float* comb, int64_t rows,
                   int n_hc, int64_t n, float* Xout) override;
  void attention(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks, float scale,
                 float* out) override;
  void indexer_scores(const float* q, const float* w, float scale, int64_t n_heads, int64_t head_dim,
                      const float* keys, RowCount n_keys, float* scores) override;
  void top_k(const float* scores, RowCount n, int64_t k, int32_t* idx) override;
  void store_row(float* ring, int64_t ring_rows, int64_t n, int64_t pos, const float* src) override;
  void compressor_store(const Matrix& ape, int64_t pos, int64_t ratio, int64_t lanes, const float* kvp,
                        const float* scp, int64_t width, float* kv, float* score) override;
  void compressor_emit(const CompressorEmit& e, int64_t pos) override;
  void compressor_pool(const float* kv, const float* score, int64_t ratio, int64_t lanes, int64_t dim,
                       float* out) override;
  void compressor_chunk(const Matrix& ape, const CompressorEmit& e, int64_t pos0, int64_t count, const float* kvp,
                        const float* scp) override;
  void indexer_chunk(const IndexerChunk& c, int64_t pos0, int64_t count) override;
  void attention_chunk(const float* q, int64_t n_heads, int64_t head_dim, const AttnChunk& kv, int64_t pos0,
                       int64_t count, const float* sinks, float scale, float* out) override;
  void moe_route(const float* logits, const int32_t* tokens, int64_t rows, const RouteParams& p, int32_t* experts,
                 float* weights) override;
  void moe_router(const Matrix& router, const float* x, int64_t rows, const int32_t* tokens, const RouteParams& p,
                  float* logits, int32_t* experts, float* weights) override;
  void moe_experts(const ExpertSet& gate, const ExpertSet& up, const ExpertSet& down, const float* x,
                   const int32_t* experts, const float* weights, int64_t rows, int64_t k, float limit,
                   float* y) override;

  const float* step_replay(const StepKey& key, int64_t pos, int32_t token, std::span<const int32_t> extra,
                           bool* record) override;
  const int32_t* step_record_begin(const StepKey& key, int64_t pos, int32_t token,
                                   std::span<const int32_t> extra) override;
  const float* step_record_end(const float* logits) override;
  void step_record_abort() noexcept override;
  std::string step_stats() const;

 private:
  struct ProfPending {
    std::string name;
    cudaEvent_t a, b;
  };
  // ---- decode-step graphs (backend.h) ----
  // A recorded step: its executable graph, the arena its buffers came from, its logits.
  struct StepGraph {
    StepKey key;
    cudaGraphExec_t exec = nullptr;
    cuda::BlockCache::Arena arena;
    const float* logits = nullptr;
    uint64_t last_use = 0;
    size_t n_extra = 0;             // extra step inputs it reads (step_replay)
    std::vector<ProfPending> prof;  // DS4_CUDA_PROFILE=graph: event pairs recorded in the graph
  };
  static constexpr size_t kMaxStepGraphs = 8;  // emission phases x indexer use of a few states
  // A position argument: a constant, or while recording, relative to the step's device position.
  cuda::DevPos dpos(int64_t p) const { return rec_ ? cuda::DevPos{d_step_, p - rec_pos_} : cuda::DevPos{nullptr, p}; }
  cuda::DevCount dcount(const RowCount& c) const {
    if (rec_ && c.ratio <= 0) fail("CUDA: internal: a plain row count ({}) inside a recorded step", c.n);
    return c.ratio > 0 ? cuda::DevCount{dpos(c.pos), c.ratio, c.n} : cuda::DevCount{{}, 0, c.n};
  }
  void launch_step(StepGraph& g, int64_t pos, int32_t token, std::span<const int32_t> extra);
  void drop_step_graph(StepGraph& g) noexcept;
  bool graphs_ = true;                   // DS4_CUDA_GRAPHS=0 turns them off
  bool fuse_hc_ = true;                  // DS4_CUDA_FUSE_HC=0: hc_pre_norm as its three ops
  bool hc_overlap_ = false;              // DS4_CUDA_HC_OVERLAP=1: the fused kernel's overlapped variant
  bool chunk_ops_ = true;                // DS4_CUDA_CHUNK=0: the chunk ops as their token-by-token loops
  bool fuse_qkv_ = true;                 // DS4_CUDA_FUSE_QKV=0: attn_qkv_prep as its five ops
  // On since checked bit for bit on a GPU (H100, 2026-12-07: cuda_backend_check and parity, every
  // CUDA vs CPU line 0): =0 turns each off (A/B).
  bool post_add_ = true;                 // DS4_CUDA_POST_ADD=0: add, then hc_post
  bool attn_store_ = true;               // DS4_CUDA_ATTN_STORE=0: a decode step's store_row as its own kernel
  void attend(const float* q, int64_t n_heads, int64_t head_dim, const AttnKv& kv, const float* sinks, float scale,
              float* out, const float* fresh, float* ring);
  bool router_fused_ = true;             // DS4_CUDA_ROUTER_FUSED=0: moe_router as matmul + moe_route
  cuda::RouteArgs route_args(const int32_t* tokens, const RouteParams& p, int32_t* experts, float* weights);
  // DS4_CUDA_FUSE_QUANT=1: rms_norm, the fused hc_pre norm and swiglu write their one-row output's
  // Q8_0 copy (cuda::Q8Out) for the Q8_0 products that read that row next (cuda::PreQ8). The copy
  // is valid until any op but a matmul runs (each begins with qact_forget()) or a matmul's
  // output covers the row. Slot 0 serves the home stream, slot 1 a branch (branch_begin), each
  // with its own buffers; a branch starts with the home slot's copy in view, and while a branch
  // that began with one is pending, the home stream makes no new copy (the branch may still be
  // reading the old one).
  bool qact_on_ = false;
  static constexpr int64_t kQactCap = 65536;  // values
  int8_t* qact_qs_[2] = {};
  float* qact_d_[2] = {};
  const float* qact_src_[2] = {};
  cuda::PreQ8 qact_view_[2];
  bool branch_shares_home_ = false;
  int qslot() const { return in_branch_ ? 1 : 0; }
  void qact_forget() {
    qact_src_[qslot()] = nullptr;
    if (!in_branch_) q8k_src_ = nullptr;
  }
  // DS4_CUDA_ROUTER_Q8K (with the fused router): moe_router also writes its input row's Q8_K
  // quantization (cuda::PreQ8K), which the moe_experts right after it reads for the same row
  // instead of quantizing it again. Forgotten at any other op (qact_forget; the matmuls too).
  bool router_q8k_ = false;
  int8_t* q8k_qs_ = nullptr;
  float* q8k_d_ = nullptr;
  int16_t* q8k_bs_ = nullptr;
  const float* q8k_src_ = nullptr;
  cuda::PreQ8K q8k_view_;
  cuda::Q8Out qact_prepare(int64_t rows, int64_t n);
  void qact_commit(const cuda::Q8Out& q, const float* y, int64_t n);
  const cuda::PreQ8* qact_for(const float* x, int64_t rows) const;
  void qact_clobbered(const float* y, int64_t rows, int64_t y_stride, int64_t n_out);
  // DS4_CUDA_Q8_SPLIT=1: a split-layout copy (cuda::q8_0_split_rows) of each Q8_0 matrix, made on
  // its first use by any product outside a recorded step (the step a graph records has run op
  // by op once before), keyed by the device data pointer; the one-row Q8_0
  // kernels read it with 16-byte loads. Costs the matrices' size again in device memory: no
  // copy is made once less than 2 GiB would stay free.
  bool q8_split_ = false;
  bool q8_split_full_ = false;
  std::map<const uint8_t*, uint8_t*> q8_splits_;
  size_t q8_split_bytes_ = 0;
  void with_q8_split(cuda::DevMatrix& dm, int64_t rows);
  bool rec_ = false;                     // recording a step now
  int64_t rec_pos_ = 0;
  int32_t rec_token_ = 0;
  std::vector<int32_t> rec_extra_;       // the recording step's extra inputs
  StepGraph rec_graph_;
  std::vector<std::unique_ptr<StepGraph>> graphs_by_key_;
  std::vector<StepKey> seen_;            // keys run once without a graph (recorded the next time)
  std::vector<StepKey> refused_;         // keys whose recording failed: op by op from then on
  uint64_t use_clock_ = 0;
  long replays_ = 0, recorded_ = 0;
  int32_t* d_step_ = nullptr;            // device {pos, token, extra...} of the step being replayed
  int32_t* h_step_ = nullptr;            // pinned staging of it (2 + kMaxStepExtra words)
  cudaEvent_t step_staged_ = nullptr;    // the staging copy has been read

  // A weight range: a device copy of host bytes (key = host address), or device memory used
  // as weights in place (alloc_weight_slots: key = dev, so the translation is the identity;
  // host and device addresses never overlap under CUDA's unified virtual addressing).
  struct Region {
    size_t bytes;
    uint8_t* dev;
    std::string what;
  };
  // Fences (backend.h): events on the stream, passed in order; passed_ is the last one seen done.
  std::deque<std::pair<uint64_t, cudaEvent_t>> fences_;
  std::vector<cudaEvent_t> fence_free_;
  uint64_t fence_next_ = 0, fence_passed_ = 0;
  // Device copy of host weight bytes [p, p+bytes); throws naming `op` and `arg` when the
  // range is not inside one registered region. Null stays null.
  const uint8_t* weight(const void* p, size_t bytes, const char* op, const char* arg) const;
  const float* weight_f(const float* p, int64_t n, const char* op, const char* arg) const {
    return reinterpret_cast<const float*>(weight(p, static_cast<size_t>(n) * sizeof(float), op, arg));
  }
  // Bytes of registered weights from p to the end of its region (0 when unregistered).
  size_t weight_tail(const void* p) const;
  cuda::DevMatrix dev_matrix(const Matrix& m, const char* op, const char* arg) const;
  // hc_pre's scale and base on the device (post/comb both null: the head); fails when missing.
  struct HcWeights {
    const float* scale;
    const float* base;
  };
  HcWeights hc_weights(const HcParams& p, const float* post, const float* comb) const;
  cuda::DevExperts dev_experts(const ExpertSet& e, const char* op, const char* arg) const;
  const double* dev_freqs(std::span<const double> f);
  void sync_and_check(const char* what);

  // ---- DS4_CUDA_PROFILE: CUDA events around every op, summed per op name ----
  // Scope of one op: records a start event now and an end event when it goes out of scope.
  class Prof {
   public:
    Prof(CudaBackend* be, std::string name) : be_(be->prof_ ? be : nullptr) {
      if (be_) be_->prof_begin(std::move(name));
    }
    ~Prof() {
      if (be_) be_->prof_end();
    }
    Prof(const Prof&) = delete;
    Prof& operator=(const Prof&) = delete;

   private:
    CudaBackend* be_;
  };
  void prof_begin(std::string name);
  void prof_end() noexcept;
  void prof_resolve() noexcept;  // the stream is idle: fold finished event pairs into the table
  void prof_resolve_after_sync() noexcept;
 public:
  std::string profile_report(bool reset);

 private:
  struct ProfEntry {
    double ms = 0;
    long long calls = 0;
  };
  bool prof_ = false;
  // DS4_CUDA_PROFILE=host: the table holds the host's time inside each op (issuing it) instead
  // of the GPU's, to find where a host-bound step spends its time.
  bool prof_host_ = false;
  // DS4_CUDA_PROFILE=graph: step graphs stay on and their recordings hold an event pair per op,
  // read after every replay (the table's "[step]" rows: GPU time per op inside the graph).
  bool prof_graph_ = false;
  const StepGraph* prof_replayed_ = nullptr;
  cudaEvent_t step_ev_[2] = {};  // around the last replay  // launched, its events not yet read
  std::chrono::steady_clock::time_point prof_t0_;
  // DS4_CUDA_HOSTSTAT=1: host time spent issuing work between synchronizations vs waiting in
  // them (a decode step that never waits is bound by the host, not the GPU), printed at exit.
  bool hoststat_ = false;
  double issue_s_ = 0, wait_s_ = 0;
  long syncs_ = 0;
  std::chrono::steady_clock::time_point last_sync_ = std::chrono::steady_clock::now();
  std::vector<cudaEvent_t> prof_free_;
  std::vector<ProfPending> prof_pending_;
  std::map<std::string, ProfEntry> prof_table_;

  CudaOptions opt_;
  cudaStream_t stream_ = nullptr;  // where ops go: home_, or side_ inside a branch
  cudaStream_t home_ = nullptr;    // the backend's stream (synchronize, fences, step graphs)
  // ---- branches (backend.h concurrency hints; DS4_CUDA_BRANCH=0: every op on home_) ----
  // A branch runs on side_, after an event recorded on home_ (fork_ev_); join() makes home_ wait
  // for join_ev_, recorded on side_ at branch_end(). Inside a recorded step both streams are
  // captured into the one graph, as two chains that meet at the join. (The activation copies'
  // rule while a branch is pending: the qact slots above.)
  bool branches_ = true;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ev_ = nullptr, join_ev_ = nullptr;
  bool in_branch_ = false, branch_pending_ = false;
  int* d_err_ = nullptr;   // device error word (cuda_ops.h)
  int* h_err_ = nullptr;   // pinned host copy
  std::map<uintptr_t, Region> weights_;  // by host start address
  std::map<std::pair<const double*, size_t>, double*> freqs_;
  // Weight upload: pinned staging buffers, each reusable once its event has fired.
  static constexpr int kStaging = 4;
  static constexpr size_t kStagingBytes = 64u << 20;
  uint8_t* staging_[kStaging] = {};
  cudaEvent_t staged_[kStaging] = {};
  size_t uploaded_ = 0;    // weight bytes copied so far
  double upload_s_ = 0;    // seconds spent copying them
  std::chrono::steady_clock::time_point last_print_{};
};

}  // namespace ds4::compute
