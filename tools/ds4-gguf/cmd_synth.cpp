// ds4-gguf synth --preset flash-q2|flash-q4|qwen36-q4 [--layers N] [--sparse|--sparse-all] [--seed S] --out FILE
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.h"
#include "convert/qwen35moe_convert.h"
#include "convert/synth.h"
#include "core/error.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: ds4-gguf synth --preset flash-q2|flash-q4|qwen36-q4 [--layers N] [--sparse|--sparse-all] [--seed S] "
               "--out FILE.gguf\n"
               "  qwen36-q4     Qwen3.6-35B-A3B (qwen35moe) Q4_K tensor table, first N layers (default 4)\n"
               "  --sparse      routed experts are file holes (zeros); --sparse-all: every tensor is a hole\n");
  return 2;
}

int cmd_synth(int argc, char** argv) {
  ds4::convert::SynthOptions o;
  bool qwen = false, layers_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ds4::Error("synth: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--preset") {
      std::string p = value();
      if (p == "qwen36-q4") {
        qwen = true;
        continue;
      }
      auto r = ds4::convert::recipe_from_name(p);
      if (!r) throw ds4::Error("synth: unknown --preset '" + p + "' (flash-q2, flash-q4; also f32, f16, q8_0)");
      o.recipe = *r;
    } else if (a == "--layers") {
      long n = std::strtol(value().c_str(), nullptr, 10);
      if (n < 1 || n > 1000) throw ds4::Error("synth: --layers must be in 1..1000");
      o.layers = static_cast<uint32_t>(n);
      layers_given = true;
    } else if (a == "--seed") o.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--sparse") o.sparse = ds4::convert::Sparse::Experts;
    else if (a == "--sparse-all") o.sparse = ds4::convert::Sparse::All;
    else if (a == "--out") o.out_path = value();
    else if (a == "-h" || a == "--help") return usage();
    else {
      std::fprintf(stderr, "synth: unknown argument '%s'\n", a.c_str());
      return usage();
    }
  }
  if (o.out_path.empty()) return usage();
  if (qwen) {
    try {
      ds4::convert::QwenSynthOptions q;
      q.out_path = o.out_path;
      q.layers = layers_given ? o.layers : 4;
      q.seed = o.seed;
      q.sparse = o.sparse;
      auto rep = ds4::convert::synth_qwen36(q);
      std::printf("wrote %s: %zu tensors, %llu data bytes\n", o.out_path.c_str(), rep.n_tensors,
                  static_cast<unsigned long long>(rep.data_bytes));
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "synth: %s\n", e.what());
      return 1;
    }
  }
  try {
    auto rep = ds4::convert::synth(o);
    std::printf("wrote %s: %zu tensors, %llu bytes (%llu written, the rest holes)\n", o.out_path.c_str(), rep.n_tensors,
                static_cast<unsigned long long>(rep.file_bytes), static_cast<unsigned long long>(rep.written_bytes));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synth: %s\n", e.what());
    return 1;
  }
}

const bool registered = ds4::tools::register_command(
    {"synth", "--preset flash-q2|flash-q4|qwen36-q4 [--layers N] [--sparse] [--seed S] --out FILE   synthetic GGUF",
     cmd_synth});

}  // namespace
