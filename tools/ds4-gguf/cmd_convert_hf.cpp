// ds4-gguf convert-hf --hf DIR --out FILE.gguf [--type f32|f16|q8_0|flash-q2|flash-q4|mxfp4-moe] [--threads N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.h"
#include "convert/convert_hf.h"
#include "core/error.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf convert-hf --hf DIR --out FILE.gguf [--type f32|f16|q8_0|flash-q2|flash-q4|mxfp4-moe] "
               "[--threads N] [--quiet]\n");
  return 2;
}

int cmd_convert_hf(int argc, char** argv) {
  ds4::convert::ConvertOptions o;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ds4::Error("convert-hf: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--hf") o.hf_dir = value();
    else if (a == "--out") o.out_path = value();
    else if (a == "--type") {
      std::string t = value();
      auto r = ds4::convert::recipe_from_name(t);
      if (!r) throw ds4::Error("convert-hf: unknown --type '" + t + "' (f32, f16, q8_0, flash-q2, flash-q4, mxfp4-moe)");
      o.recipe = *r;
    } else if (a == "--threads") o.threads = std::atoi(value().c_str());
    else if (a == "--quiet") quiet = true;
    else if (a == "-h" || a == "--help") return usage();
    else {
      std::fprintf(stderr, "convert-hf: unknown argument '%s'\n", a.c_str());
      return usage();
    }
  }
  if (o.hf_dir.empty() || o.out_path.empty()) return usage();
  if (!quiet) o.log = [](std::string_view line) { std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data()); };
  try {
    auto rep = ds4::convert::convert_hf(o);
    for (const auto& n : rep.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    std::printf("wrote %s: %zu tensors, %llu data bytes (%s)\n", o.out_path.c_str(), rep.n_tensors,
                static_cast<unsigned long long>(rep.data_bytes),
                std::string(ds4::convert::recipe_name(o.recipe)).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert-hf: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"convert-hf", "--hf DIR --out FILE.gguf [--type f32|f16|q8_0|flash-q2|flash-q4|mxfp4-moe]   HF DeepSeek V4 checkpoint -> GGUF",
     cmd_convert_hf});

}  // namespace
