#pragma once
// Rewind checkpoints of a DeepSeek V4 State (model/deepseek4/state.h) or a qwen35moe State.
//
// The state at position n is: the sliding-window ring (overwritten in place, so lost when the
// session moves on), each compressor's partial windows `kv`/`score` (also overwritten), its
// emitted `rows` (append-only: the first k rows at position n are the same k rows at any later
// position), the token list (append-only) and the last logits. A checkpoint therefore copies
// the overwritten parts and the logits, and records only the row counts; restoring it onto a
// later state of the same sequence truncates rows and tokens to those counts.
#include <cstdint>
#include <vector>

#include "model/deepseek4/hparams.h"
#include "model/deepseek4/state.h"
#include "model/qwen35moe/hparams.h"
#include "model/qwen35moe/state.h"

namespace ds4::session {

struct CompressorMark {
  std::vector<float> kv, score;
  int64_t n_rows = 0;
};

struct Checkpoint {
  int64_t n_pos = 0;
  std::vector<float> logits;
  std::vector<std::vector<float>> raw;  // per layer
  std::vector<CompressorMark> attn, index;  // per layer
  // qwen35moe: per layer, the Gated DeltaNet convolution history and recurrent state (empty for
  // attention layers, whose KV cache is append-only and only truncated by n_pos).
  std::vector<std::vector<float>> conv, ssm;

  uint64_t bytes() const;
};

Checkpoint take_checkpoint(const model::deepseek4::State& st);

// Returns `st` to the checkpoint's position. `st` must be the same token sequence at a
// position >= cp.n_pos (the caller guarantees it by dropping checkpoints past a rewind);
// throws ds4::Error when the shapes or counts show otherwise.
void restore_checkpoint(model::deepseek4::State& st, const Checkpoint& cp);

// Bytes of one checkpoint for these hyperparameters (memory plan).
uint64_t checkpoint_bytes(const model::deepseek4::HParams& hp);

// qwen35moe: the DeltaNet layers' state cannot be truncated, so a checkpoint copies it whole
// (conv history + recurrent state per layer) with the logits; restoring puts it back and cuts
// the tokens (and thereby the KV cache's valid rows) to cp.n_pos.
Checkpoint take_checkpoint(const model::qwen35moe::State& st);
void restore_checkpoint(model::qwen35moe::State& st, const Checkpoint& cp);
uint64_t checkpoint_bytes(const model::qwen35moe::HParams& hp);

}  // namespace ds4::session
