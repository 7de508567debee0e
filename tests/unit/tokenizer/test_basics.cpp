// Behaviour the spec states directly (section 9.1, trap 21), with small examples whose ids
// were taken from HF tokenizers 0.23.2 on the same tokenizer.json (noted per test).
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer_fixture.h"

namespace ds4::test {
namespace {

using Ids = std::vector<int32_t>;

std::vector<std::string> texts(const Tokenizer& tok, const Ids& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_text(id));
  return out;
}

// Spec: bytes 33-126, 161-172, 174-255 map to themselves, the other 68 to 256.. in byte order.
TEST(TokenizerByteLevel, AlphabetFollowsTheSpec) {
  const auto& bl = tokenizer::ByteLevel::get();
  EXPECT_EQ(bl.byte_to_cp['A'], uint32_t('A'));
  EXPECT_EQ(bl.byte_to_cp[0], 0x100u);
  EXPECT_EQ(bl.byte_to_cp[' '], 0x120u);   // 'Ġ': 33 control/space bytes come first
  EXPECT_EQ(bl.byte_to_cp['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(bl.byte_to_cp[127], 0x121u);
  EXPECT_EQ(bl.byte_to_cp[160], 0x142u);
  EXPECT_EQ(bl.byte_to_cp[173], 0x143u);   // the 68th and last remapped byte
  EXPECT_EQ(bl.byte_to_cp[174], 174u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(bl.byte_of(bl.byte_to_cp[size_t(b)]), b);
}

// HF: "Hello, world!" -> Hello , Ġworld !  = [19923, 14, 2058, 3]
TEST(TokenizerEncode, SimpleSentence) {
  const Tokenizer& tok = deepseek_tokenizer(false);
  EXPECT_EQ(tok.encode("Hello, world!", false), (Ids{19923, 14, 2058, 3}));
  EXPECT_TRUE(tok.encode("", false).empty());
  EXPECT_TRUE(tok.encode("", true).empty());
}

// Trap 21: digits go in groups of at most three (HF: [6895, 18009, 25]).
TEST(TokenizerEncode, DigitsInGroupsOfThree) {
  const Tokenizer& tok = deepseek_tokenizer(false);
  const Ids ids = tok.encode("1234567", false);
  EXPECT_EQ(texts(tok, ids), (std::vector<std::string>{"123", "456", "7"}));
  EXPECT_EQ(ids, (Ids{6895, 18009, 25}));
}

TEST(TokenizerEncode, SpecialIdsByString) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.find_token("<｜User｜>"), 128803);
  EXPECT_EQ(tok.find_token("<｜Assistant｜>"), 128804);
  EXPECT_EQ(tok.find_token("<think>"), 128821);
  EXPECT_EQ(tok.find_token("</think>"), 128822);
  EXPECT_EQ(tok.find_token("｜DSML｜"), 128825);
  EXPECT_FALSE(deepseek_tokenizer(false).find_token("<think>").has_value());
}

// Spec 9.1: specials only when asked; a user typing "<｜User｜>" gets ordinary tokens.
TEST(TokenizerEncode, SpecialsOnlyWhenAsked) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  EXPECT_EQ(tok.encode("<｜User｜>hi", true), (Ids{128803, 6366}));  // HF default
  const Ids plain = tok.encode("<｜User｜>hi", false);
  EXPECT_GT(plain.size(), 2u);
  for (int32_t id : plain) EXPECT_LT(id, 128000) << "an added token in plain mode";
  for (const char* s : {"｜DSML｜", "<think>", "<｜end▁of▁sentence｜>", "<｜latest_reminder｜>"})
    for (int32_t id : tok.encode(s, false)) EXPECT_LT(id, 128000) << s;
}

// Spec 9.1: the close marker begins with the two tokens "</" + "｜DSML｜".
TEST(TokenizerEncode, DsmlIsOneTokenAndTheBracketIsSeparate) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  const Ids ids = tok.encode("</｜DSML｜tool_calls>", true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1718);  // "</"
  EXPECT_EQ(ids[1], 128825);
  EXPECT_EQ(tok.decode(ids), "</｜DSML｜tool_calls>");
}

TEST(TokenizerDecode, SpecialTokensDecodeLiterally) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  EXPECT_EQ(tok.token_to_piece(128803), "<｜User｜>");
  EXPECT_EQ(tok.token_to_piece(0), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok.token_to_piece(128821), "<think>");
  EXPECT_EQ(tok.token_to_piece(223), " ");  // "Ġ"
  EXPECT_EQ(tok.token_to_piece(201), "\n");  // "Ċ"
  EXPECT_THROW(tok.token_to_piece(-1), ds4::Error);
  EXPECT_THROW(tok.token_to_piece(tok.n_vocab()), ds4::Error);
  const Ids bad{19923, tok.n_vocab() + 5};
  EXPECT_THROW(tok.decode(bad), ds4::Error);
}

// Invalid UTF-8: every byte goes through the byte alphabet, so decode gives it back.
TEST(TokenizerEncode, InvalidUtf8RoundTrips) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    const Ids ids = tok.encode(s, true);
    ASSERT_EQ(ids.size(), 1u) << b;
    EXPECT_EQ(tok.decode(ids), s) << b;
  }
  for (const std::string s : {std::string("\xff\xfe"), std::string("abc\x80\x80 def"), std::string("\xe2\x82"),
                              std::string("\xed\xa0\x80 surrogate"), std::string("<｜User｜>\xc3"),
                              std::string("\xf4\x90\x80\x80"), std::string("12\xc0\xaf" "34")})
    for (bool special : {false, true}) EXPECT_EQ(tok.decode(tok.encode(s, special)), s);
}

// Invalid runs are separate pieces; valid text around them splits as on its own.
TEST(TokenizerPreTokenizer, InvalidBytesAreTheirOwnPiece) {
  tokenizer::PreTokenizer pre;
  const std::string s = "ab\xff\xfe" "cd";
  std::vector<tokenizer::Span> spans;
  pre.split(s, spans);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(s.substr(spans[1].begin, spans[1].end - spans[1].begin), "\xff\xfe");
}

TEST(TokenizerEncode, LongInputsDoNotBreakTheRegexEngine) {
  const Tokenizer& tok = deepseek_tokenizer(false);
  for (const std::string s : {std::string(1 << 20, ' '), std::string(200000, '7'), std::string(300000, 'a'),
                              std::string(100000, '\n')}) {
    const Ids ids = tok.encode(s, false);
    EXPECT_EQ(tok.decode(ids), s);
  }
}

TEST(TokenizerEncode, ConcurrentEncodesAgree) {
  const Tokenizer& tok = deepseek_tokenizer(true);
  std::vector<Ids> expected;
  for (const auto& l : corpus()) expected.push_back(tok.encode(l.bytes, true));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = size_t(t); i < corpus().size(); i += 2)
        if (tok.encode(corpus()[i].bytes, true) != expected[i]) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace ds4::test
