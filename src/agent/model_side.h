#pragma once
// The model side of the agent loop: one interface, so that the loop runs the same over the
// in-process engine (engine_model.h), a scripted model for tests (script_model.h) and, later,
// a remote ds4-server.
//
// The model side holds a history: the exact bytes whose tokens are in the model state
// (text()). The loop appends rendered chat text to it (append) and lets the model continue it
// (generate); every generated piece becomes part of the history as produced, so nothing the
// model sampled is ever re-tokenized. Only when the loop's rendering no longer starts with
// text() does it call resync, which re-tokenizes everything and keeps the longest common
// token prefix.
//
// The server's InferenceModel (src/server/inference_model.h) is the token-level interface of
// the HTTP worker; this one is text-level so that a remote server can implement it too.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/marked_text.h"
#include "ds4/sampling.h"

namespace ds4::agent {

struct PrefillStats {
  int64_t reused = 0;     // tokens kept from the model state
  int64_t replayed = 0;   // tokens re-evaluated from a checkpoint to reach the kept prefix
  int64_t evaluated = 0;  // new tokens evaluated
  bool cancelled = false;
  double seconds = 0;
};

enum class GenStop { StopToken, MaxTokens, Cancelled, ContextFull, Callback };
const char* to_string(GenStop s);

struct GenStats {
  int64_t generated = 0;  // pieces handed to the callback
  GenStop reason = GenStop::StopToken;
  double seconds = 0;
};

struct EvalControl {
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(int64_t done, int64_t total)> progress;
};

struct GenParams {
  int64_t max_tokens = -1;  // < 0: until a stop token, cancellation or a full context
  const std::atomic<bool>* cancel = nullptr;
};

// Returns false to stop after this piece (the piece stays in the history).
using PieceFn = std::function<bool(std::string_view piece)>;

class ModelSide {
 public:
  virtual ~ModelSide() = default;

  virtual std::string model_name() const = 0;
  virtual std::string model_id() const = 0;  // payloads of another model are refused
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_past() const = 0;
  virtual const std::string& text() const = 0;

  // Appends rendered chat text to the history and evaluates it. Only the ranges where the
  // renderer placed control tokens (MarkedText::controls) become control tokens; user messages,
  // tool output and file contents never do. After a cancellation text() ends where evaluation
  // stopped.
  virtual PrefillStats append(const chat::MarkedText& text, const EvalControl& control) = 0;
  // Makes the history `text`, reusing the longest common token prefix with the current one.
  virtual PrefillStats resync(const chat::MarkedText& text, const EvalControl& control) = 0;

  // Continues the history; tool-call structure is sampled greedily. Stop tokens end the
  // generation and are not part of the history.
  virtual GenStats generate(const GenParams& params, const PieceFn& on_piece) = 0;

  // Model state (the KV payload) to / from a file. load_state replaces the history by the
  // saved one; it throws ds4::Error, leaving the model unchanged, for another model's payload
  // or a corrupt file.
  virtual void save_state(const std::string& path) const = 0;
  virtual void load_state(const std::string& path) = 0;
  virtual void set_sampler(const SamplerConfig& config) = 0;
};

}  // namespace ds4::agent
