#pragma once
// Helpers of the CLI tests: a per-process scratch directory holding the chat test model,
// running ds4 with captured output, reading trace files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../unit/session/chat_model.h"

namespace ds4::test {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir;
  std::string model;
  Scratch() {
    dir = fs::path(DS4_BUILD_DIR) / "tests" / "cli" / std::to_string(::getpid());
    fs::create_directories(dir);
    model = (dir / "chat.gguf").string();
    write_chat_model(model);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

inline Scratch& scratch() {
  static Scratch s;
  return s;
}

inline std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct RunResult {
  int rc = -1;
  std::string out, err;
};

// Runs ds4 with `args` (shell words, already quoted), stdin from `input` when given.
inline RunResult run_ds4(const std::string& args, const std::string* input = nullptr) {
  static int n = 0;
  const std::string base = scratch().path("run" + std::to_string(n++));
  std::string cmd = std::string(DS4_BIN) + " " + args + " >" + base + ".out 2>" + base + ".err";
  if (input) {
    std::ofstream(base + ".in", std::ios::binary) << *input;
    cmd += " <" + base + ".in";
  } else {
    cmd += " </dev/null";
  }
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  return r;
}

inline std::vector<nlohmann::json> read_trace(const std::string& p) {
  std::vector<nlohmann::json> v;
  std::istringstream in(read_file(p));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

inline std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& t, const std::string& kind) {
  std::vector<nlohmann::json> v;
  for (const auto& e : t)
    if (e["event"] == kind) v.push_back(e);
  return v;
}

}  // namespace ds4::test
