#pragma once
// Shared setup of the session tests: the chat test model, written once per process.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chat_model.h"
#include "ds4/session.h"

namespace ds4::test {

// Files are per process (ctest runs test cases as parallel processes) and removed at exit.
struct ChatModelFiles {
  std::map<uint32_t, std::string> paths;
  ~ChatModelFiles() {
    for (auto& [s, p] : paths) std::filesystem::remove(p);
  }
};

inline std::string chat_model_path(uint32_t seed = 1) {
  static ChatModelFiles files;
  auto& done = files.paths;
  auto it = done.find(seed);
  if (it != done.end()) return it->second;
  const auto dir = std::filesystem::path(DS4_BUILD_DIR) / "tests" / "session";
  std::filesystem::create_directories(dir);
  const std::string p = (dir / ("chat_model_" + std::to_string(seed) + "_" + std::to_string(::getpid()) + ".gguf")).string();
  ChatModelConfig c;
  c.seed = seed;
  write_chat_model(p, c);
  done[seed] = p;
  return p;
}

inline std::shared_ptr<const Engine> open_engine(int64_t max_batch = 512, uint32_t seed = 1, int64_t ctx = 0) {
  EngineOptions o;
  o.model_path = chat_model_path(seed);
  o.threads = 2;
  o.max_batch = max_batch;
  o.ctx_size = ctx;
  return Engine::open(o);
}

inline std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab = 256) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % static_cast<uint32_t>(vocab));
  return t;
}

inline std::vector<float> to_vec(std::span<const float> s) { return {s.begin(), s.end()}; }

}  // namespace ds4::test
