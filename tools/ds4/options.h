#pragma once
// Command-line options of the ds4 tool, shared by its modes.
#include <cstdint>
#include <string>
#include <vector>

namespace ds4::tools {

struct Ds4Options {
  std::string model_path;
  std::string backend = "cpu";
  bool act_quant_sim = true;
  bool float_acts = false;  // debug: quantized weights x f32 activations
  int threads = 0;  // 0: all hardware threads
  bool verbose = false;

  // Logits dump (architecture.md §3).
  std::vector<int32_t> tokens;
  std::string dump_logits_path;
  bool incremental = false;
};

// Evaluates opts.tokens and writes [n_tokens][n_vocab] little-endian f32 to
// opts.dump_logits_path. Throws ds4::Error on failure.
void run_dump_logits(const Ds4Options& opts);

}  // namespace ds4::tools
