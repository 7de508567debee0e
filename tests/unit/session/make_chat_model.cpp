// ds4_make_chat_model OUT.gguf [SEED]: writes the tiny chat test model (chat_model.h).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "chat_model.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s OUT.gguf [SEED]\n", argv[0]);
    return 2;
  }
  try {
    ds4::test::ChatModelConfig c;
    if (argc == 3) c.seed = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
    ds4::test::write_chat_model(argv[1], c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
