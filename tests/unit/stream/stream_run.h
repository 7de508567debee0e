#pragma once
// One DeepSeek V4 run for the streaming model tests: a prefill of `toks` (in chunks of the
// options' max_batch) and a greedy continuation of `steps` tokens, one at a time, on the CPU
// backend, with whatever streaming options the caller set (experts, host backend, benchmark
// routing). Each test compares such runs byte for byte, streaming against resident.
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek4/model.h"

namespace ds4::test {

struct StreamRun {
  std::vector<float> prefill;  // [toks][vocab]
  std::vector<float> decode;   // the greedy steps' logits
  std::vector<int32_t> greedy;
};

int32_t argmax(const float* v, int64_t n);
StreamRun run_deepseek4(const std::string& path, const model::deepseek4::Options& o, const std::vector<int32_t>& toks,
                        int steps);
// The same logits to the bit and the same greedy tokens.
bool same_bits(const StreamRun& a, const StreamRun& b);

}  // namespace ds4::test
