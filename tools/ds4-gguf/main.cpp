// ds4-gguf: GGUF file utility. Dispatches `ds4-gguf <command> ...` to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "command.h"
#include "core/error.h"

#ifndef DS4_VERSION
#define DS4_VERSION "unknown"
#endif
#ifndef DS4_GIT_DESCRIBE
#define DS4_GIT_DESCRIBE "unknown"
#endif
#ifndef DS4_BUILD_TYPE
#define DS4_BUILD_TYPE "unknown"
#endif

namespace {

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown compiler";
#endif
}

// Whether the CPU running this binary has AVX2 (not whether the build used it).
const char* cpu_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") ? "yes" : "no";
#else
  return "no (not x86)";
#endif
}

void print_usage(std::FILE* out) {
  fmt::print(out, "usage: ds4-gguf <command> [args]\n       ds4-gguf --version | --help\n\ncommands:\n");
  size_t w = 0;
  for (const auto& c : ds4::tools::commands()) w = std::max(w, c.name.size());
  for (const auto& c : ds4::tools::commands()) fmt::print(out, "  {:<{}}  {}\n", c.name, w, c.usage);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 1;
  }
  std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    print_usage(stdout);
    return 0;
  }
  if (first == "--version") {
    fmt::print("ds4-gguf {} ({})\ncompiler: {}\nbuild type: {}\nCPU AVX2: {}\n", DS4_VERSION, DS4_GIT_DESCRIBE,
               compiler(), DS4_BUILD_TYPE, cpu_avx2());
    return 0;
  }
  for (const auto& c : ds4::tools::commands()) {
    if (c.name != first) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      fmt::print(stderr, "ds4-gguf {}: {}\n", c.name, e.what());
      return 1;
    }
  }
  fmt::print(stderr, "ds4-gguf: unknown command '{}' (see ds4-gguf --help)\n", first);
  return 1;
}
