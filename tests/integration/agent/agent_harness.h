#pragma once
// Helpers of the ds4-agent tests: a per-process scratch directory with the chat test model,
// a fresh workdir and sessions directory per test, scripted-model rules with DSML tool calls,
// running the binary, reading its JSON-lines events.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../unit/session/chat_model.h"

namespace ds4::agent::test {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void spit(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

struct Scratch {
  fs::path dir;
  std::string model;
  Scratch() {
    dir = fs::path(DS4_BUILD_DIR) / "tests" / "agent" / std::to_string(::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    model = (dir / "chat.gguf").string();
    ds4::test::write_chat_model(model);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

inline Scratch& scratch() {
  static Scratch s;
  return s;
}

inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// One DSML invoke, in the grammar of src/chat/dsml_parser.h. Values are strings.
inline std::string invoke(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i) s += "\n";
    s += "<｜DSML｜parameter name=\"" + params[i].first + "\" string=\"true\">" + params[i].second +
         "</｜DSML｜parameter>";
  }
  return s + "\n</｜DSML｜invoke>";
}

// Content followed by a tool-call block of one or more invokes.
inline std::string calls(const std::string& content, const std::vector<std::string>& invokes) {
  std::string s = content + "\n\n<｜DSML｜tool_calls>\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i ? "\n" : "") + invokes[i];
  return s + "\n</｜DSML｜tool_calls>";
}

struct RunResult {
  int rc = -1;
  std::string out, err;
  std::vector<json> events;  // stdout parsed as JSON lines (with --json)
  std::vector<json> of(const std::string& kind) const {
    std::vector<json> v;
    for (const auto& e : events)
      if (e.value("event", "") == kind) v.push_back(e);
    return v;
  }
};

// A test's world: workdir, sessions directory, the script file.
struct World {
  fs::path root, work, sessions, script;
  explicit World(const std::string& name) {
    root = scratch().dir / name;
    fs::remove_all(root);
    work = root / "work";
    sessions = root / "sessions";
    script = root / "script.json";
    fs::create_directories(work);
  }
  void rules(const std::vector<std::pair<std::string, std::string>>& r) const {
    json j = {{"rules", json::array()}};
    for (const auto& [when, text] : r) j["rules"].push_back({{"when", when}, {"text", text}});
    spit(script, j.dump());
  }
  // The common flags: the chat model, 2 threads, a context that holds the tool prompt, no
  // reasoning (the scripts write none), the scripted model, this world's directories.
  std::string base() const {
    return std::string(DS4_AGENT_BIN) + " -m " + scratch().model + " -t 2 --ctx 32768 --nothink --temp 0" +
           " --debug-script " + sh_quote(script.string()) + " --workdir " + sh_quote(work.string()) +
           " --sessions-dir " + sh_quote(sessions.string());
  }
  RunResult run(const std::string& args, const std::string& input = "") const {
    static int n = 0;
    const fs::path b = root / ("run" + std::to_string(n++));
    spit(b.string() + ".in", input);
    const std::string cmd = "env HOME=" + sh_quote(root.string()) + " " + base() + " " + args + " <" +
                            sh_quote(b.string() + ".in") + " >" + sh_quote(b.string() + ".out") + " 2>" +
                            sh_quote(b.string() + ".err");
    const int st = std::system(cmd.c_str());
    RunResult r;
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(b.string() + ".out");
    r.err = slurp(b.string() + ".err");
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] != '{') continue;
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) r.events.push_back(std::move(j));
    }
    return r;
  }
};

// Every prefill after the first of a run continues the history: nothing re-tokenized, nothing
// replayed, and all tokens of the previous turn kept.
inline void expect_append_only(const RunResult& r) {
  std::vector<json> pre = r.of("prefill"), ends = r.of("turn_end");
  ASSERT_EQ(pre.size(), ends.size()) << r.out;
  for (size_t i = 0; i < pre.size(); ++i) {
    EXPECT_FALSE(pre[i]["resynced"].get<bool>()) << "prefill " << i;
    EXPECT_EQ(pre[i]["replayed"], 0) << "prefill " << i;
    if (i > 0) {
      EXPECT_EQ(pre[i]["reused"], ends[i - 1]["n_past"]) << "prefill " << i;
    }
  }
}

}  // namespace ds4::agent::test
