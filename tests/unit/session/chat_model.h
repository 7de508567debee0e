#pragma once
// A tiny random DeepSeek V4 GGUF with a working tokenizer, for session and CLI tests: the
// synthetic model of tests/unit/model (4 layers: SWA, CSA ratio 4, HCA ratio 8, CSA; window 8)
// plus a byte-level vocabulary (ids 0-255: the GPT-2 byte alphabet, no merges) and the DeepSeek
// V4 chat tokens the renderer writes, as added tokens:
//   256 BOS, 257 EOS, 258 <｜User｜>, 259 <｜Assistant｜>, 260 <think>, 261 </think>.
#include <cstdint>
#include <string>

namespace ds4::test {

struct ChatModelConfig {
  uint32_t seed = 1;
  int64_t context_length = 4096;
};

void write_chat_model(const std::string& path, const ChatModelConfig& c = {});

}  // namespace ds4::test
