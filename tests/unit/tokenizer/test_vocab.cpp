// Vocabulary I/O: tokenizer.json -> GGUF -> tokenizer, and the errors bad input must give.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/v4_specials.h"
#include "tokenizer/vocab.h"
#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

using nlohmann::json;
using tokenizer::TokenType;
using tokenizer::Vocab;

const json& real_json() {
  static const json j = [] {
    std::ifstream f(tokenizer_json_path());
    return json::parse(f);
  }();
  return j;
}

// A tiny tokenizer.json with DeepSeek's pipeline: the 256 byte tokens, "a"+"b" -> "ab", and
// two added tokens.
json tiny_json() {
  json j;
  j["version"] = "1.0";
  j["normalizer"] = real_json()["normalizer"];
  j["pre_tokenizer"] = real_json()["pre_tokenizer"];
  j["decoder"] = real_json()["decoder"];
  j["post_processor"] = nullptr;
  json vocab = json::object();
  const auto& bl = tokenizer::ByteLevel::get();
  for (int b = 0; b < 256; ++b) vocab[bl.byte_to_utf8[size_t(b)]] = b;
  vocab["ab"] = 256;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"vocab", vocab}, {"merges", json::array({"a b"})}};
  j["added_tokens"] = json::array({
      {{"id", 257}, {"content", "<｜X｜>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
       {"normalized", false}, {"special", true}},
      {{"id", 258}, {"content", "<u>"}, {"single_word", false}, {"lstrip", true}, {"rstrip", true},
       {"normalized", true}, {"special", false}},
  });
  return j;
}

Vocab parse(const json& j, bool v4 = false) { return tokenizer::vocab_from_hf_json_text(j.dump(), "tiny.json", v4); }

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerVocab, TinyJsonParses) {
  const Vocab v = parse(tiny_json());
  ASSERT_EQ(v.tokens.size(), 259u);
  EXPECT_EQ(v.types[256], TokenType::Normal);
  EXPECT_EQ(v.types[257], TokenType::Control);
  EXPECT_EQ(v.types[258], TokenType::UserDefined);
  ASSERT_EQ(v.added.size(), 2u);
  EXPECT_EQ(v.added[1].flags, tokenizer::kLstrip | tokenizer::kRstrip | tokenizer::kNormalized);
  const Tokenizer tok = Tokenizer::from_vocab(v, "tiny");
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{256}));
}

TEST(TokenizerVocab, GgufRoundTripKeepsEverything) {
  const Vocab v = tokenizer::vocab_from_hf_json(tokenizer_json_path(), true);
  const std::string path = std::string(DS4_BUILD_DIR) + "/tokenizer_vocab_roundtrip.gguf";
  {
    gguf::Writer w(path);
    tokenizer::vocab_to_gguf(v, w);
    w.write_header();
    w.finish();
  }
  const auto f = gguf::File::open(path);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "joyai-llm");
  const Vocab r = tokenizer::vocab_from_gguf(f);
  EXPECT_EQ(r.tokens, v.tokens);
  EXPECT_EQ(r.types, v.types);
  EXPECT_EQ(r.merges, v.merges);
  ASSERT_EQ(r.added.size(), v.added.size());
  for (size_t i = 0; i < r.added.size(); ++i) {
    EXPECT_EQ(r.added[i].id, v.added[i].id);
    EXPECT_EQ(r.added[i].flags, v.added[i].flags);
  }
  EXPECT_EQ(r.bos, 0);
  EXPECT_EQ(r.eos, 1);
  EXPECT_EQ(r.tokens.size(), 128826u);
  EXPECT_EQ(r.merges.size(), 127741u);
}

// A GGUF from another converter has no tokenizer.ds4.* keys: token types decide.
TEST(TokenizerVocab, GgufWithoutOurKeysUsesTokenTypes) {
  Vocab v = parse(tiny_json());
  const std::string path = std::string(DS4_BUILD_DIR) + "/tokenizer_vocab_plain.gguf";
  {
    gguf::Writer w(path);
    w.add_kv("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    w.add_kv("tokenizer.ggml.pre", gguf::Value::string("deepseek-v3"));
    w.add_kv("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
    std::vector<gguf::Value> types;
    for (auto t : v.types) types.push_back(gguf::Value::i32(int32_t(t)));
    w.add_kv("tokenizer.ggml.token_type", gguf::Value::array(gguf::ValueType::I32, types));
    w.add_kv("tokenizer.ggml.merges", gguf::Value::string_array(v.merges));
    w.write_header();
    w.finish();
  }
  const Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.encode("x<｜X｜>y<u>", true), (std::vector<int32_t>{'x', 257, 'y', 258}));  // byte b has id b here
}

TEST(TokenizerVocab, RefusesUnsupportedJson) {
  json j = tiny_json();
  j["normalizer"] = {{"type", "NFKC"}};  // NFC is supported (Qwen tokenizers); NFKC is not
  expect_error([&] { parse(j); }, "normalizer");

  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}";
  expect_error([&] { parse(j); }, "pre_tokenizer");

  j = tiny_json();
  j["pre_tokenizer"]["pretokenizers"][3]["add_prefix_space"] = true;
  expect_error([&] { parse(j); }, "add_prefix_space");

  j = tiny_json();
  j["model"]["byte_fallback"] = true;
  expect_error([&] { parse(j); }, "byte_fallback");

  j = tiny_json();
  j["added_tokens"][0]["id"] = 300;  // HF would number it 257
  expect_error([&] { parse(j); }, "would give it id 257");

  j = tiny_json();
  j["model"]["merges"] = json::array({"a"});
  expect_error([&] { parse(j); }, "merges[0]");

  expect_error([] { tokenizer::vocab_from_hf_json_text("{not json", "x.json", false); }, "not valid JSON");
  expect_error([] { tokenizer::vocab_from_hf_json("/nonexistent/tokenizer.json", false); }, "cannot open");
}

TEST(TokenizerVocab, RefusesMergeOfUnknownTokens) {
  json j = tiny_json();
  j["model"]["merges"] = json::array({"a b", "ab zz"});
  const Vocab v = parse(j);
  expect_error([&] { Tokenizer::from_vocab(v, "tiny"); }, "merge 1");
}

TEST(TokenizerVocab, RefusesOtherPreTokenizersInGguf) {
  const Vocab v = parse(tiny_json());
  const auto write = [&](const std::string& path, const std::string& model, const std::string& pre, bool short_types) {
    gguf::Writer w(path);
    w.add_kv("tokenizer.ggml.model", gguf::Value::string(model));
    w.add_kv("tokenizer.ggml.pre", gguf::Value::string(pre));
    w.add_kv("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
    std::vector<gguf::Value> types;
    for (size_t i = 0; i < v.types.size() - (short_types ? 1 : 0); ++i) types.push_back(gguf::Value::i32(1));
    w.add_kv("tokenizer.ggml.token_type", gguf::Value::array(gguf::ValueType::I32, types));
    w.add_kv("tokenizer.ggml.merges", gguf::Value::string_array(v.merges));
    w.write_header();
    w.finish();
  };
  const std::string dir = DS4_BUILD_DIR;
  write(dir + "/tok_bad1.gguf", "gpt2", "llama3", false);
  expect_error([&] { Tokenizer::load(dir + "/tok_bad1.gguf"); }, "tokenizer.ggml.pre");
  write(dir + "/tok_bad2.gguf", "llama", "joyai-llm", false);
  expect_error([&] { Tokenizer::load(dir + "/tok_bad2.gguf"); }, "tokenizer.ggml.model");
  write(dir + "/tok_bad3.gguf", "gpt2", "joyai-llm", true);
  expect_error([&] { Tokenizer::load(dir + "/tok_bad3.gguf"); }, "token_type");
}

// The compiled V4 table and the JSON the HF reference run used must be the same.
TEST(TokenizerVocab, V4TableMatchesOracleJson) {
  std::ifstream f(std::string(DS4_SOURCE_DIR) + "/tools/oracle/tokenizer/v4_added_tokens.json");
  const json j = json::parse(f);
  const auto table = tokenizer::v4_specials();
  ASSERT_EQ(j["tokens"].size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(j["tokens"][i]["id"].get<int32_t>(), table[i].id);
    EXPECT_EQ(j["tokens"][i]["content"].get<std::string>(), table[i].content);
    EXPECT_EQ(j["tokens"][i]["verified"].get<bool>(), table[i].id_reported);
  }
}

}  // namespace
}  // namespace ds4::test
