#pragma once
// A scratch directory per test (removed afterwards) and a ToolHost that records what the
// tools showed and answers confirmations from a list.
#include <gtest/gtest.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/tools.h"

namespace ds4::agent::test {

namespace fs = std::filesystem;

struct TempDir {
  fs::path dir;
  TempDir() {
    static int n = 0;
    dir = fs::path(DS4_BUILD_DIR) / "tests" / "agent_unit" /
          (std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path operator/(const std::string& s) const { return dir / s; }
};

inline void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct RecordingHost : ToolHost {
  std::deque<Answer> answers;  // empty: every question is answered No
  std::vector<std::string> questions, diffs, commands;
  Answer confirm(const std::string& q) override {
    questions.push_back(q);
    if (answers.empty()) return Answer::No;
    Answer a = answers.front();
    answers.pop_front();
    return a;
  }
  void show_diff(const std::string& d) override { diffs.push_back(d); }
  void command_started(const std::string& c) override { commands.push_back(c); }
};

inline chat::ToolCall call(const std::string& name, chat::Json args) {
  chat::ToolCall c;
  c.id = "call_1";
  c.name = name;
  c.arguments = std::move(args);
  return c;
}

}  // namespace ds4::agent::test
