#pragma once
// Engine: one loaded model, shared by any number of sessions (session.h).
//
//   ds4::EngineOptions eo;
//   eo.model_path = "ds4flash.gguf";
//   auto engine = ds4::Engine::open(eo);                 // throws ds4::Error
//   fmt::print("{}\n", engine->memory_plan().describe());
//   auto session = engine->new_session();
//   session->sync(engine->tokenizer().encode(prompt, /*parse_special=*/true));
//
// Thread safety: an Engine is immutable after open() and may be shared between threads
// (hold it by the shared_ptr open() returns; sessions keep it alive). Sessions are
// single-threaded objects, but different sessions may be used from different threads at once:
// their model evaluations take turns on the engine's one compute thread pool (a CPU pool is
// the whole machine; running two evaluations side by side would only contend for it).
//
// What is not here: tensors and backend internals (src/model, src/compute), and chat
// rendering. Prompt text comes from src/chat/renderer.h (ds4_chat, linked by ds4_session):
// render a chat::Conversation to text, then tokenize it with parse_special = true.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ds4/tokenizer.h"

namespace ds4 {

class Session;
struct SessionOptions;

struct EngineOptions {
  std::string model_path = "ds4flash.gguf";
  std::string backend = "cpu";  // "cpu"; "cuda" throws "not built with CUDA support"
  int threads = 0;              // compute threads; <= 0: all hardware threads
  // Context size (tokens) of new sessions; 0: the model's training context
  // (deepseek4.context_length), or 4096 for a file without it. Values above the training
  // context are allowed: nothing in the model enforces a limit, quality is another matter.
  int64_t ctx_size = 0;
  // FP8 KV rounding and Hadamard+FP4 indexer rounding (spec §5.2-5.4), as the official
  // implementation does. Off reproduces transformers' float-only math.
  bool act_quant_sim = true;
  // Longest batch one forward pass takes; prefill runs in chunks of this many tokens.
  // Cancellation and progress are checked between chunks. 0: the backend's default
  // (default_max_batch), which Engine::options() then reports.
  int64_t max_batch = 0;

  // Routed-expert streaming (src/stream): experts are read on demand from the GGUF, or from its
  // packed expert file (`ds4-gguf pack-experts`), into a host-RAM cache. Output is bit-identical
  // to resident mode. A GGUF whose experts were moved to a packed file always streams.
  bool ssd_streaming = false;
  std::string expert_cache_host;             // budget: "8GB", "512MiB" or N slots; "" = every expert
  // Device backends (cuda): the tier of experts in device memory above the host cache, copied
  // in from it (src/stream/device_tier.h). Same spelling; "" = sized from the device's free
  // memory after the non-expert weights. Refused below one layer's experts for one token.
  std::string expert_cache_gpu;
  // Device backends: the experts the gpu tier misses are copied into it over the link ("copy")
  // or computed on the CPU where they sit in the host cache ("cpu"); "auto" compares the CPU's
  // expert rate with the link's (stream/planner.h plan_expert_compute; its default rates, or
  // expert_host_compute_rates "CPU_GBPS,LINK_GBPS"). Same output either way. Ignored on the
  // CPU backend (it computes every expert where it sits).
  std::string expert_host_compute = "auto";
  std::string expert_host_compute_rates;
  std::string expert_cache_policy = "hot";   // "hot" (decayed selection count + recency) or "lru"
  std::string expert_io = "auto";            // "auto" (io_uring, else pread), "uring", "pread"
  // A packed expert file read one record (the whole expert) per read instead of one read per
  // component (gate, up, down): fewer, larger reads. Off by default until measured on an NVMe
  // (docs/BENCHMARKS.md, session 28: +7% decode on the 2-core VM's virtio disk).
  bool expert_record_reads = false;
  bool expert_prefetch_hash = true;          // prefetch hash-routed layers' experts per token
  bool expert_prefetch_lookahead = true;     // next layer's router on this layer's input
  bool expert_protect = true;                // prefetched experts are not evicted while fresh
  std::string packed_experts;                // "" = MODEL.gguf.experts when it exists
  std::string trace_routing;                 // write a routing trace (docs/FORMATS.md) here
  // Benchmark only (DeepSeek V4): "zipf" or "zipf:SEED" replaces the learned layers' top-k
  // expert ids with a synthetic source (per-layer Zipf popularity, token-to-token locality; a
  // function of seed, position and layer: src/stream/synthetic_routing.h), so expert caches
  // see realistic reuse on synthetic weights. The routing weights stay the router's scores at
  // those ids. "" = off (the model's own routing). The model id (payload tag) includes it.
  std::string bench_routing;
  // Residency plan (DeepSeek V4 on the CPU backend; src/stream/planner.h), printed with the
  // memory plan: by default the model stays resident when its weights + planned_sessions states at
  // ctx_size + scratch + memory_reserve_gib fit in the available host memory, and otherwise its
  // routed experts stream through a cache sized from what is left (refused below one token's
  // experts). resident: refuse to start unless it fits. host_memory_gib: the memory the plan
  // may use (0: MemAvailable). The CUDA backend checks GPU memory itself: it runs resident
  // unless streaming is asked for (or the experts were freed), and then the plan sizes the host
  // cache (the non-expert weights and the state live on the device) and the gpu tier.
  bool resident = false;
  double memory_reserve_gib = 2.0;
  double host_memory_gib = 0;
  // How many live sessions the residency plan counts (each with its state at ctx_size): the
  // server keeps up to --max-sessions of them (ds4-server sets it); the CLI and agent run one.
  int planned_sessions = 1;

  // Directional steering (DeepSeek V4 only): a direction file from `ds4-gguf steer-build` for
  // this model (docs/FORMATS.md "Steering direction file"; another model's file is an error),
  // and the scales new sessions start with: A * v is added to the residual streams after the
  // attention sublayer of each covered layer, B * v after its FFN sublayer. Scales 0 (or no
  // file) leave the forward pass untouched. Session::set_steering changes them per session.
  std::string dir_steering_file;
  float dir_steering_attn = 0;
  float dir_steering_ffn = 0;

  // Model analysis (DeepSeek V4, resident experts; see compute/analysis_backend.h). Each
  // session's backend is wrapped in an observing decorator only when one of these is set, so an
  // engine without them runs exactly as before. collect_imatrix: per weight tensor (per routed
  // expert), the sum of squared inputs per column and the row count, over every evaluation of
  // every session (Engine::write_imatrix). collect_expert_profile: per layer and expert, how
  // often it is selected and its routing-weight sum (Engine::write_expert_profile). prune_mask:
  // a mask from `ds4-gguf prune` for this model; its experts never win routing.
  bool collect_imatrix = false;
  bool collect_expert_profile = false;
  std::string prune_mask;
};

// EngineOptions::max_batch when it is 0. On a GPU backend a chunk's tensor-core products read
// each weight once per chunk, and a routed expert gets ~6/256 of its rows: 4096 tokens (~96 rows
// per expert) when the experts are resident on the device (an 8K prompt prefilled 1.04x faster
// than in chunks of 2048, and a 32K one too: H100, 34-layer Flash q2, 2026-12-07), 2048 when
// they stream (the chunk's scratch, ~2.7 GB per 2048 rows at Flash width, would come out of the
// gpu expert tier). 512 on the CPU (its default before there was a GPU backend).
int64_t default_max_batch(const std::string& backend, bool experts_stream = false);

// Floating-point work counted from the shapes (not measured), for the FLOP rates ds4-bench
// prints: 2 FLOP per weight element a token multiplies, per key dimension a query scores and
// per value dimension it sums.
struct FlopCount {
  // Every weight matrix whole and the routed experts k of n; the tables read by row (token
  // embedding, hash-routing ids, compressor position biases) and the output head excluded.
  double matrix_per_token = 0;
  double head = 0;  // the output head, per token that gets logits
  // deepseek4's attention (no ratios: not counted, as for qwen35moe): per layer 0 (window only)
  // or the compress ratio, and the shapes the rows are scored and summed at.
  std::vector<int32_t> ratios;
  int64_t n_head = 0, head_dim = 0, window = 0, indexer_heads = 0, indexer_dim = 0, indexer_top_k = 0;
  bool attention_counted() const { return !ratios.empty(); }
  // The query at 0-based position pos, every layer: scores and weighted sums over the raw window
  // and the compressed rows it sees (all of them, or the indexer's top-k), and the indexer's
  // scores where it selects. Pooling, norms and softmax are not counted.
  double attention(int64_t pos) const;
  // n prompt tokens from position first: matrices and attention per token, and the head once
  // (a prefill computes the last token's logits only).
  double prompt(int64_t first, int64_t n) const;
};

// Memory needed to run, from the file's tensor table and the hyperparameters (not measured).
struct MemoryPlan {
  uint64_t file_bytes = 0;       // size of the GGUF file (mapped read-only, shared, paged on demand)
  uint64_t weights_bytes = 0;    // tensor data inside it
  // Weight bytes one decode token reads: every tensor whole, except the routed experts (the
  // k used of each layer's experts) and the tables read by row (the token embedding, hash
  // routing's token-to-expert ids: one row each). Decode t/s times this is the weight bandwidth.
  uint64_t decode_bytes_per_token = 0;
  FlopCount flops;
  int64_t n_ctx = 0;             // context the state figures are for
  uint64_t state_fixed_bytes = 0;      // per session, independent of position: sliding windows,
                                       // compressor partial windows, logits
  uint64_t state_bytes_per_token = 0;  // per session, growth per evaluated token (compressed
                                       // rows amortized, token list); fractional parts rounded up
  uint64_t state_bytes_at_ctx = 0;     // fixed + growth for n_ctx tokens, excluding checkpoints
  uint64_t checkpoint_bytes = 0;       // one rewind checkpoint (see SessionOptions)
  std::string expert_streaming;        // "" when resident; else source, cache budget, policy, I/O
  std::string residency;               // the residency plan's line ("" when none was made)
  std::string describe() const;        // one human-readable line per figure
};

struct EngineInfo {
  std::string architecture;    // general.architecture ("deepseek4")
  std::string model_name;      // general.name, or the file name when absent
  std::string chat_template;   // tokenizer.chat_template ("" when absent); the ChatML
                               // renderer's template revision comes from it
  std::string model_id;        // 16 hex digits: XXH64 of the GGUF header, metadata and tensor
                               // table (file bytes before the data section) followed by the
                               // first and last 4 KiB of every tensor's data, so re-trained
                               // weights of the same shapes differ. Payloads are tagged with it.
  int32_t n_vocab = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;     // deepseek4.context_length
  int64_t n_ctx = 0;           // default context of new sessions (EngineOptions::ctx_size resolved)
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  // Tokens that end an assistant turn (EOS, and "<｜User｜>" when the vocabulary has it: a model
  // that skipped EOS and started the next user turn has finished).
  std::vector<int32_t> stop_ids;
  bool has_tokenizer = false;  // false: the GGUF has no tokenizer.ggml.* keys (token ids only)
  std::string backend;         // "cpu"
  int threads = 0;             // resolved compute thread count
  bool act_quant_sim = true;
  // Steering direction file: "" when none; else its path, the layers it covers and its id
  // (16 hex digits, XXH64 of the file's bytes; session payloads record it).
  std::string steering_file;
  int64_t steering_first_layer = 0, steering_layers = 0;
  std::string steering_id;
};

// Expert-streaming counters since the engine opened (what `--stats` prints, in numbers).
struct ExpertCounters {
  uint64_t tokens = 0, hits = 0, inflight_hits = 0, misses = 0, evictions = 0, reads = 0, bytes_read = 0;
  uint64_t prefetch_issued = 0, prefetch_useful = 0, prefetch_wasted = 0;  // hash + lookahead
  uint64_t prefetch_unresolved = 0;  // prefetched, neither used nor evicted yet (waste if never used)
  double stall_seconds = 0;
  uint64_t cache_budget_bytes = 0, cache_bytes = 0;
  // The gpu tier (all 0 without one); hits/misses above are then the host tier's, which sees
  // the gpu tier's misses only.
  uint64_t gpu_hits = 0, gpu_misses = 0, gpu_evictions = 0, h2d_bytes = 0;
  uint64_t gpu_transient = 0;  // copied into the gpu tier without admission (hot policy)
  uint64_t gpu_budget_bytes = 0, gpu_bytes = 0;
  // Expert host compute (EngineOptions::expert_host_compute): gpu-tier misses computed on the
  // CPU where they sit instead of copied (their bytes; 0 when copying).
  uint64_t host_computed_bytes = 0;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Opens, validates and binds the model file. Throws ds4::Error naming the file and the
  // problem (missing file, not GGUF, unsupported architecture, bad tensor, unknown backend).
  static std::shared_ptr<const Engine> open(const EngineOptions& options);

  const EngineInfo& info() const;
  const MemoryPlan& memory_plan() const;
  const EngineOptions& options() const;

  // The model's tokenizer. Throws ds4::Error when info().has_tokenizer is false.
  const Tokenizer& tokenizer() const;
  bool is_stop_token(int32_t id) const;

  // Expert-streaming counters (hits, misses, prefetch, bytes read, stall time) as printable
  // lines; "" when the model runs resident. Safe to call from any thread.
  std::string expert_stats() const;
  std::optional<ExpertCounters> expert_counters() const;  // nullopt when resident

  // Analysis output (EngineOptions::collect_*), written atomically (temporary file + rename):
  // llama.cpp's GGUF imatrix format with the given metadata, and the expert profile JSON.
  // Throws ds4::Error when that collection is off or the write fails. Safe from any thread.
  void write_imatrix(const std::string& path, const std::vector<std::string>& datasets, uint32_t chunk_count,
                     uint32_t chunk_size) const;
  void write_expert_profile(const std::string& path) const;
  // Tokens the analysis has seen (each token once, however many layers); 0 when off.
  uint64_t analysis_tokens() const;
  // "" without a prune mask, else e.g. "prune mask m.json: 12 experts (keep-fraction 0.5 ...)".
  std::string prune_description() const;

  // A fresh, empty session (position 0). Throws ds4::Error when options are invalid.
  std::unique_ptr<Session> new_session() const;
  std::unique_ptr<Session> new_session(const SessionOptions& options) const;

  ~Engine();
  struct Impl;
  // Internal (src/session): the implementation behind this handle.
  const Impl& impl() const { return *impl_; }

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4
