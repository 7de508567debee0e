// Writes the qwen35moe test model the ChatML server tests run: a random checkpoint
// (qwen35moe_checkpoint.h; DeltaNet, attention, DeltaNet, DeltaNet) with a 272-token vocabulary,
// converted by convert-hf, whose placeholder vocabulary holds the 256 bytes and the ChatML
// control tokens. Usage: ds4_make_qwen_model OUT.gguf
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "convert/convert_hf.h"
#include "qwen35moe_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ds4_make_qwen_model OUT.gguf\n");
    return 2;
  }
  try {
    const auto dir = std::filesystem::temp_directory_path() / ("ds4_make_qwen_" + std::to_string(::getpid()));
    ds4::test::QwenTiny c;
    c.vocab = 272;
    c.layers = {"linear_attention", "full_attention", "linear_attention", "linear_attention"};
    ds4::test::write_qwen_checkpoint((dir / "qwen-chatml-test").string(), c, 31);  // general.name
    ds4::convert::ConvertOptions o;
    o.hf_dir = (dir / "qwen-chatml-test").string();
    o.out_path = argv[1];
    o.recipe = ds4::convert::Recipe::F32;
    ds4::convert::convert_hf(o);
    std::filesystem::remove_all(dir);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4_make_qwen_model: %s\n", e.what());
    return 1;
  }
}
