#pragma once
// Per-session inference state of DeepSeek V4 (spec §8): everything that must persist between
// tokens. The tensors live in backend memory (host for the CPU backend, device memory for
// CUDA) with fixed capacity for the session's context, so a decode step never reallocates;
// counts and the token list stay on the host. Session code (checkpoints, payloads) moves the
// tensors with Buffer::to_host / from_host.
#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "model/deepseek4/hparams.h"

namespace ds4::model::deepseek4 {

// One compressor (attention: D = head_dim; indexer: D = indexer head dim) of a layer with
// ratio R. Ratio-4 compressors keep two lanes (previous and current window), others one.
struct CompressorState {
  int64_t ratio = 0;
  int64_t lanes = 0;
  int64_t dim = 0;                 // D: width of one emitted row
  int64_t capacity = 0;            // rows the `rows` buffer holds (n_ctx / ratio)
  int64_t n_rows = 0;              // emitted rows so far (== n_pos / ratio)
  compute::Buffer<float> kv;       // (lanes*ratio) rows x (lanes*dim): projected kv per slot
  compute::Buffer<float> score;    // same shape: gate score + ape; -inf marks an empty slot
  compute::Buffer<float> rows;     // capacity x dim, append-only

  int64_t width() const { return lanes * dim; }
  size_t slot_floats() const { return static_cast<size_t>(lanes * ratio * lanes * dim); }
  void reset(compute::Backend& be, int64_t ratio, int64_t lanes, int64_t dim, int64_t capacity);
  void clear_slots();  // kv = 0, score = -inf
};

struct LayerState {
  compute::Buffer<float> raw;  // sliding_window rows x head_dim; position p lives in slot p % window
  CompressorState attn;        // ratio > 0
  CompressorState index;       // ratio == 4 (indexer keys)
};

struct State {
  compute::Backend* backend = nullptr;
  int64_t n_ctx = 0;             // positions the buffers hold
  int64_t n_pos = 0;             // next position = number of tokens evaluated
  std::vector<int32_t> tokens;   // every token evaluated so far
  std::vector<float> logits;     // logits of the last evaluated position (n_vocab), host
  std::vector<LayerState> layers;
  uint64_t serial = 0;           // unique per created state: recorded decode steps key on it


  static State create(const HParams& hp, compute::Backend& be, int64_t n_ctx);
};

}  // namespace ds4::model::deepseek4
