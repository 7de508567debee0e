#pragma once
// -b/--batch-size (EngineOptions::max_batch), defined once for every tool that opens an engine:
// the same spelling, default and help text everywhere.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace ds4::tools {

inline CLI::Option* add_batch_flag(CLI::App& app, int64_t& batch, const std::string& names = "-b,--batch-size") {
  return app
      .add_option(names, batch, "prefill chunk: tokens per forward pass (default 0: on a GPU backend 4096, 2048 when experts stream; 512 on the CPU)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace ds4::tools
