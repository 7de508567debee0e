#pragma once
// Command-line options of the ds4 tool, shared by its modes.
#include <cstdint>
#include <string>
#include <vector>

#include "common/expert_flags.h"

namespace ds4::tools {

struct Ds4Options {
  std::string model_path;
  std::string backend = "cpu";
  bool act_quant_sim = true;
  bool float_acts = false;  // debug: quantized weights x f32 activations
  int threads = 0;  // 0: all hardware threads
  int64_t batch = 0;  // EngineOptions::max_batch (0: the backend's default)
  bool verbose = false;

  // Routed-expert streaming and residency (tools/common/expert_flags.h); `stats` prints the
  // streaming counters at the end.
  ExpertFlags experts;
  bool stats = false;

  // Directional steering (EngineOptions::dir_steering_*).
  std::string dir_steering_file;
  float dir_steering_attn = 0, dir_steering_ffn = 0;

  // Model analysis (EngineOptions::collect_*, prune_mask): offline collection over
  // --imatrix-data in chunks (collect.cpp), or during chat / generation (written at exit).
  std::string imatrix_out, imatrix_data, expert_profile_out, prune_mask;
  int64_t imatrix_chunk = 256, imatrix_checkpoint = 10, imatrix_max_chunks = 0;

  // Logits dump (architecture.md §3).
  std::vector<int32_t> tokens;
  std::string dump_logits_path;
  bool incremental = false;
};

// Evaluates opts.tokens and writes [n_tokens][n_vocab] little-endian f32 to
// opts.dump_logits_path. Throws ds4::Error on failure.
void run_dump_logits(const Ds4Options& opts);
// Offline imatrix / expert-profile collection over opts.imatrix_data. Returns the exit status.
int run_collect(const Ds4Options& opts);

}  // namespace ds4::tools
