#pragma once
// Per-session inference state of DeepSeek V4 (spec §8): everything that must persist between
// tokens. Plain vectors of f32 so a later save/load can serialize it field by field and a
// rewind can truncate the append-only parts.
#include <cstdint>
#include <vector>

#include "model/deepseek4/hparams.h"

namespace ds4::model::deepseek4 {

// One compressor (attention: D = head_dim; indexer: D = indexer head dim) of a layer with
// ratio R. Ratio-4 compressors keep two lanes (previous and current window), others one.
struct CompressorState {
  int64_t ratio = 0;
  int64_t lanes = 0;
  int64_t dim = 0;             // D: width of one emitted row
  std::vector<float> kv;       // (lanes*ratio) rows x (lanes*dim): projected kv per slot
  std::vector<float> score;    // same shape: gate score + ape; -inf marks an empty slot
  std::vector<float> rows;     // emitted rows, n_rows() x dim, append-only

  int64_t width() const { return lanes * dim; }
  int64_t n_rows() const { return dim ? static_cast<int64_t>(rows.size()) / dim : 0; }
  void reset(int64_t ratio, int64_t lanes, int64_t dim);
};

struct LayerState {
  std::vector<float> raw;    // sliding_window rows x head_dim; position p lives in slot p % window
  CompressorState attn;      // ratio > 0
  CompressorState index;     // ratio == 4 (indexer keys)
};

struct State {
  int64_t n_pos = 0;             // next position = number of tokens evaluated
  std::vector<int32_t> tokens;   // every token evaluated so far
  std::vector<float> logits;     // logits of the last evaluated position (n_vocab)
  std::vector<LayerState> layers;

  static State create(const HParams& hp);
};

}  // namespace ds4::model::deepseek4
