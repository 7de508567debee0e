#pragma once
// Session: one evolving token sequence over a shared Engine (engine.h) — the model state of
// a conversation, its next-token logits, a sampler, rewind checkpoints and save/load.
//
//   auto s = engine->new_session();
//   ds4::EvalOptions eo;  eo.cancel = &stop_flag;  eo.progress = show_bar;
//   auto r = s->sync(prompt_ids, eo);      // reuses the longest common prefix, evaluates the rest
//   s->set_sampler({.temperature = 0});    // greedy
//   ds4::GenerateOptions go;  go.max_tokens = 256;  go.cancel = &stop_flag;
//   auto g = s->generate(go, [&](const ds4::GeneratedToken& t) { fwrite(t.piece...); return true; });
//
// Threading: a Session is not thread-safe; use it from one thread at a time. Only `cancel`
// flags may be set from other threads (or signal handlers: std::atomic<bool> is lock-free).
//
// Invariants: tokens() are exactly the tokens whose effect is in the model state, n_past() ==
// tokens().size(), and logits() are the next-token logits after the last of them (empty at
// position 0). Every operation either completes or leaves the session at a consistent earlier
// point (cancellation keeps what was evaluated, up to a chunk boundary). A ds4::Error from the
// model itself (never caused by valid input) resets the session to position 0.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "ds4/engine.h"
#include "ds4/sampling.h"

namespace ds4 {

// Thrown when tokens would not fit the session's context. The message names the context
// size, the tokens requested and by how many they are over, e.g.
// "context overflow: 4100 tokens do not fit the 4096-token context (4 over)".
class ContextOverflow : public Error {
 public:
  ContextOverflow(int64_t n_ctx, int64_t requested);
  int64_t n_ctx() const { return n_ctx_; }
  int64_t requested() const { return requested_; }  // total tokens the session would hold
  int64_t over_by() const { return requested_ - n_ctx_; }

 private:
  int64_t n_ctx_, requested_;
};

struct SessionOptions {
  int64_t n_ctx = 0;  // 0: the engine's context (EngineOptions::ctx_size resolved)
  // Rewind checkpoints: a snapshot of the small mutable state (sliding-window rings and
  // compressor partial windows; compressed rows are append-only and truncated by count) is
  // taken at every multiple of checkpoint_interval positions and at the end of every
  // sync()/eval() call. Rewinding to position T restores the nearest checkpoint <= T and
  // re-evaluates the tokens between it and T, so a rewind costs at most the distance to the
  // checkpoint below it in prefill. At most max_checkpoints are kept (position 0 needs none):
  // beyond that the newest two stay and older ones are thinned where they are densest.
  // checkpoint_interval 0 disables the interval checkpoints; max_checkpoints 0 disables all.
  int64_t checkpoint_interval = 2048;
  int max_checkpoints = 8;
};

// Called between prefill chunks: `done` of `total` tokens of this call evaluated.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct EvalOptions {
  // Checked before each chunk (EngineOptions::max_batch tokens) and before each checkpoint
  // boundary; when set the call returns early with cancelled = true.
  const std::atomic<bool>* cancel = nullptr;
  ProgressFn progress;
};

struct EvalResult {
  int64_t reused = 0;      // tokens kept from the previous state (sync: common prefix length)
  int64_t replayed = 0;    // tokens re-evaluated to reach the common prefix from a checkpoint
  int64_t evaluated = 0;   // new tokens evaluated by this call (not counting replayed ones)
  bool cancelled = false;  // stopped early; tokens() shows how far it got
  double seconds = 0;      // wall time of the model evaluation (replay included)
};

// One sampled token as handed to the streaming callback.
struct GeneratedToken {
  int32_t id = -1;
  std::string piece;  // its bytes (may be part of a UTF-8 sequence); empty without a tokenizer
  bool is_stop = false;        // a stop token (EngineInfo::stop_ids); it ends the generation
  Logprobs logprobs;           // filled when GenerateOptions::logprobs_top_n >= 0
};

struct GenerateOptions {
  int64_t max_tokens = -1;     // < 0: until a stop token, cancellation or the context is full
  bool stop_at_stop_tokens = true;
  int32_t logprobs_top_n = -1; // >= 0: fill GeneratedToken::logprobs with that many alternatives
  const std::atomic<bool>* cancel = nullptr;  // checked before each token
  SampleOptions sample;        // per-token adjustments (temperature override, logit bias)
};

enum class StopReason { MaxTokens, StopToken, Cancelled, ContextFull, Callback };
const char* to_string(StopReason r);

struct GenerateResult {
  int64_t n_generated = 0;  // tokens handed to the callback (the stop token included)
  StopReason reason = StopReason::MaxTokens;
  double seconds = 0;       // wall time of sampling + evaluation
};

// Returns false to stop generating (reason Callback).
using TokenFn = std::function<bool(const GeneratedToken&)>;

class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Engine& engine() const;
  int64_t n_ctx() const;
  int64_t n_past() const;
  const std::vector<int32_t>& tokens() const;
  // Next-token logits (n_vocab floats) after tokens(); empty when n_past() == 0.
  std::span<const float> logits() const;

  // Makes tokens() == `tokens`: keeps the longest common prefix with the current tokens,
  // rewinds to it (from a checkpoint, see SessionOptions) and evaluates the rest.
  // When `tokens` equals the current tokens nothing is evaluated. When the prefix is the
  // whole of `tokens` but shorter than the state, it rewinds, and, to recompute the logits
  // of the last kept token, re-evaluates from a checkpoint (>= 1 token).
  // Throws ContextOverflow (before touching the state) when tokens.size() > n_ctx(), and
  // ds4::Error for a token id outside the vocabulary (naming its index).
  EvalResult sync(std::span<const int32_t> tokens, const EvalOptions& options = {});

  // Appends and evaluates `tokens`. Same errors as sync().
  EvalResult eval(std::span<const int32_t> tokens, const EvalOptions& options = {});

  // Keeps the first n tokens (0 <= n <= n_past(); throws ds4::Error otherwise). Exact: the
  // state equals a fresh evaluation of those n tokens along the same chunking (tests prove
  // byte equality). Returns the number of tokens re-evaluated from the checkpoint.
  int64_t rewind(int64_t n);

  // Sampler owned by the session, so that a seeded stream continues across calls and is
  // saved in payloads. set_sampler validates (throws ds4::Error) and reseeds.
  void set_sampler(const SamplerConfig& config);
  Sampler& sampler();
  // Samples from logits() (throws ds4::Error when n_past() == 0). Does not evaluate.
  int32_t sample(const SampleOptions& options = {});
  // Model log-probabilities (no temperature / filters) of logits().
  Logprobs logprobs(int32_t chosen, int32_t n_top) const;

  // Sample → callback → evaluate loop starting from logits(). A stop token is handed to the
  // callback but not evaluated (it is not in tokens() afterwards; the next sync() that
  // includes it evaluates it). Throws ds4::Error when n_past() == 0.
  GenerateResult generate(const GenerateOptions& options, const TokenFn& on_token);

  // Directional steering scales (EngineOptions::dir_steering_*) for the tokens evaluated from
  // now on. The state already computed is kept as it is (the REPL's /steer). Non-zero scales
  // need an engine opened with a steering file (ds4::Error otherwise). The steering that
  // produced the state is recorded in payloads: a state computed under other scales, or
  // under scales that changed along the way, is never loaded into this session (load_payload
  // throws, so the disk KV cache treats it as a miss).
  void set_steering(float attn, float ffn);
  float steering_attn() const;
  float steering_ffn() const;

  // Session payload: tokens, next-token logits, sampler RNG position and all per-layer state,
  // tagged with EngineInfo::model_id (format: docs/FORMATS.md "Session payload"). Loading
  // replaces this session's state; it throws ds4::Error — leaving the session unchanged —
  // for another model's payload, a wrong version, a context larger than n_ctx(), or a
  // truncated / corrupt payload (a checksum covers every byte).
  std::vector<uint8_t> save_payload() const;
  void load_payload(std::span<const uint8_t> payload);
  // The same without the steering check: the state keeps the steering record it was saved
  // with. For moving a live conversation to another session of the same engine (the REPL's
  // /ctx), not for caches.
  void load_payload_any_steering(std::span<const uint8_t> payload);
  void save(const std::string& path) const;  // written to path.tmp, then renamed
  void load(const std::string& path);

  struct Impl;

 private:
  void load_payload_impl(std::span<const uint8_t> payload, bool any_steering);
  friend class Engine;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4
